#!/bin/bash
find /app/data -type f -size +51200c -printf '%s %p\n' | sort -rn | cut -d' ' -f2- > /app/large_files.txt
cat /app/large_files.txt
