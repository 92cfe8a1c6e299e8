#!/bin/bash
# Three faults: the test recipe is indented with spaces (make needs a tab), the
# object name is misspelt (mathutil.o), and the link step lacks -lm for sqrt().
set -euo pipefail
cd /app
sed -i 's/^    \.\/tests\/run_tests.sh$/\t.\/tests\/run_tests.sh/' Makefile
sed -i 's|build/mathutil.o|build/mathutils.o|' Makefile
sed -i 's|\t$(CC) $(CFLAGS) -o $@ $^$|\t$(CC) $(CFLAGS) -o $@ $^ -lm|' Makefile
make clean
make all
make test
