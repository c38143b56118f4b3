#include <stdio.h>
#include <string.h>

#include "tensorhub/tensorhub.h"

int th_header_test_sizes(void);

int main(void) {
    if (!th_header_test_sizes()) {
        fprintf(stderr, "config init or version mismatch\n");
        return 1;
    }
    /* C lets a caller pass any int as an enum: the library must cope. */
    if (strcmp(th_status_str((th_status)-999), "unknown status") != 0 || th_dtype_size((th_dtype)200) != 0) {
        fprintf(stderr, "out-of-range enum values are not handled\n");
        return 1;
    }
    printf("header ok: tensorhub %s\n", th_version());
    return 0;
}
