#!/bin/bash
cd /app/texts
file *
sed -i -e '1s/^\xEF\xBB\xBF//' -e 's/\r$//' *
file *
