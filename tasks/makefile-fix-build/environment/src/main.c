#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mathutils.h"

static int usage(const char *prog)
{
    fprintf(stderr, "usage: %s hyp A B | gcd A B | fact N\n", prog);
    return 2;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "hyp") == 0) {
        printf("%.3f\n", hypotenuse(atof(argv[2]), atof(argv[3])));
    } else if (argc == 4 && strcmp(argv[1], "gcd") == 0) {
        printf("%ld\n", gcd(atol(argv[2]), atol(argv[3])));
    } else if (argc == 3 && strcmp(argv[1], "fact") == 0) {
        printf("%llu\n", factorial((unsigned)atoi(argv[2])));
    } else {
        return usage(argv[0]);
    }
    return 0;
}
