#!/bin/bash
grep -h -i 'root cause' /app/incident/*.txt /app/incident/*.md
grep -h 'Resolved at' /app/incident/*.txt
grep -h -i 'root cause:' /app/incident/*.txt | grep -o 'db-[a-z]*-[0-9]*' | head -1 > /app/root_cause.txt
grep -h 'Resolved at' /app/incident/*.txt | grep -o '[0-9][0-9]:[0-9][0-9]' | head -1 > /app/resolved_at.txt
