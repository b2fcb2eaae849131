/* kernel_check.c — standalone kernel test runner (no Criterion), used for the
 * cross-compiled NEON build under qemu-aarch64: make neon-test. */
#include <string.h>

#include "kernel_cases.h"

int main(void) {
    int passed = 0, failed = 0;
    /* the dot-product table only where the CPU (or qemu's model of one) has the instruction */
    const plumb_kernels *dp = strstr(plumb_cpu_features(), "dotprod") ? plumb_kernels_neon_dotprod() : NULL;
    /* the x86 tables where the CPU runs them (plumb_kernels_select checks) */
    const plumb_kernels *avx2 = plumb_kernels_select("avx2") == 0 ? plumb_kernels_avx2() : NULL,
                        *vnni = plumb_kernels_select("avx2-vnni") == 0 ? plumb_kernels_avx2_vnni() : NULL,
                        *avx512 = plumb_kernels_select("avx512-vnni") == 0 ? plumb_kernels_avx512_vnni() : NULL;
    const plumb_kernels *tables[] = {plumb_kernels_scalar(), avx2, vnni, avx512, plumb_kernels_neon(), dp};
    if (plumb_kernels_neon() && !dp) printf("kernels neon-dotprod: skipped, this CPU has no dot-product instruction (%s)\n", plumb_cpu_features());
    for (int i = 0; i < 6; i++) {
        if (!tables[i]) continue;
        kc_result r = kernel_check_table(tables[i]);
        printf("kernels %-12s: %d passed, %d failed\n", tables[i]->name, r.passed, r.failed);
        passed += r.passed;
        failed += r.failed;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
