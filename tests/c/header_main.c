#include <stdio.h>

#include "tensorhub/tensorhub.h"

int th_header_test_sizes(void);

int main(void) {
    if (!th_header_test_sizes()) {
        fprintf(stderr, "config init or version mismatch\n");
        return 1;
    }
    printf("header ok: tensorhub %s\n", th_version());
    return 0;
}
