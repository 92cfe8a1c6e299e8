#!/bin/bash
# Fix the three compile errors: missing <stdlib.h>, a missing semicolon, and a
# definition of sum_values whose parameter type disagrees with its declaration.
set -euo pipefail
cd /app
sed -i 's|#include "stats.h"|#include <stdlib.h>\n#include "stats.h"|' src/main.c
sed -i 's|           max_value(values, n))$|           max_value(values, n));|' src/main.c
sed -i 's|long sum_values(const int \*values, int n)|long sum_values(const int *values, size_t n)|' src/stats.c
sed -i 's|for (int i = 0; i < n; i++)|for (size_t i = 0; i < n; i++)|' src/stats.c
make
