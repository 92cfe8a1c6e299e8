#!/bin/bash
python3 - <<'PY'
import csv
from decimal import Decimal

totals = {}
with open("/app/sales.csv", newline="") as f:
    for row in csv.DictReader(f):
        totals[row["category"]] = totals.get(row["category"], Decimal(0)) + Decimal(row["amount"])
with open("/app/category_totals.csv", "w", newline="") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["category", "total"])
    for cat, total in sorted(totals.items(), key=lambda kv: kv[1], reverse=True):
        w.writerow([cat, f"{total:.2f}"])
PY
