#ifndef STATS_H
#define STATS_H

#include <stddef.h>

/* Reads one integer per line from path; returns a malloc'd array (caller frees) or NULL. */
int *read_values(const char *path, size_t *count);

long sum_values(const int *values, size_t n);
int min_value(const int *values, size_t n);
int max_value(const int *values, size_t n);

#endif
