#!/bin/bash
mkdir -p /app/project/src /app/project/tests /app/project/docs
echo '# Inventory Service' > /app/project/README.md
echo 'print("hello")' > /app/project/src/main.py
: > /app/project/docs/notes.txt
