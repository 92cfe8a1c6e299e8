#!/bin/bash
cd /app/logs
ls app-*.log | sort | head -n -2 | xargs -r gzip
ls -l
