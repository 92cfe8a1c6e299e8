#!/bin/bash
sort -u /app/list.txt > /app/unique.txt
