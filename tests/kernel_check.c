/* kernel_check.c — standalone kernel test runner (no Criterion), used for the
 * cross-compiled NEON build under qemu-aarch64: make neon-test. */
#include "kernel_cases.h"

int main(void) {
    int passed = 0, failed = 0;
    const plumb_kernels *tables[] = {plumb_kernels_scalar(), plumb_kernels_avx2(), plumb_kernels_avx2_vnni(), plumb_kernels_neon()};
    for (int i = 0; i < 4; i++) { /* (the AVX-512 table is checked by the Criterion suite) */
        if (!tables[i]) continue;
        kc_result r = kernel_check_table(tables[i]);
        printf("kernels %-6s: %d passed, %d failed\n", tables[i]->name, r.passed, r.failed);
        passed += r.passed;
        failed += r.failed;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
