/* report.h — an experiment record (jansson JSON, as plumb bench builds it)
 * rendered as Markdown, and as an HTML page with SVG charts that a browser
 * shows without network access. */
#ifndef PLUMB_REPORT_H
#define PLUMB_REPORT_H

#include <jansson.h>

int bench_write_markdown(json_t *record, const char *path);
int bench_write_html(json_t *record, const char *dir);

#endif
