#include <stdio.h>
#include "stats.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s FILE\n", argv[0]);
        return 2;
    }
    size_t n = 0;
    int *values = read_values(argv[1], &n);
    if (values == NULL) {
        fprintf(stderr, "stats: cannot read %s\n", argv[1]);
        return 1;
    }
    if (n == 0) {
        printf("count=0\n");
        free(values);
        return 0;
    }
    printf("count=%zu sum=%ld min=%d max=%d\n", n, sum_values(values, n), min_value(values, n),
           max_value(values, n))
    free(values);
    return 0;
}
