#include <stdio.h>
#include <stdlib.h>
#include "stats.h"

int *read_values(const char *path, size_t *count)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NULL;
    size_t cap = 16, n = 0;
    int *values = malloc(cap * sizeof *values);
    if (values == NULL) {
        fclose(f);
        return NULL;
    }
    int v;
    while (fscanf(f, "%d", &v) == 1) {
        if (n == cap) {
            cap *= 2;
            int *grown = realloc(values, cap * sizeof *values);
            if (grown == NULL) {
                free(values);
                fclose(f);
                return NULL;
            }
            values = grown;
        }
        values[n++] = v;
    }
    fclose(f);
    *count = n;
    return values;
}

long sum_values(const int *values, int n)
{
    long total = 0;
    for (int i = 0; i < n; i++)
        total += values[i];
    return total;
}

int min_value(const int *values, size_t n)
{
    int best = values[0];
    for (size_t i = 1; i < n; i++)
        if (values[i] < best)
            best = values[i];
    return best;
}

int max_value(const int *values, size_t n)
{
    int best = values[0];
    for (size_t i = 1; i < n; i++)
        if (values[i] > best)
            best = values[i];
    return best;
}
