#!/bin/bash
python3 /app/gen_report.py
python3 /app/gen_report.py
cd /app/reports
ls report_*.txt | sort -t_ -k2,2 | tail -n 1 > /app/newest.txt
grep -h '^value: ' report_*.txt | awk '{s += $2} END {print s}' > /app/total.txt
cat /app/newest.txt /app/total.txt
