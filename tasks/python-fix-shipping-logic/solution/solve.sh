#!/bin/bash
# Bugs: zone letters are not upper-cased, express doubles only the base (not the
# surcharge), and the free-shipping threshold uses > instead of >=.
set -euo pipefail
cd /app
python3 - <<'PY'
from pathlib import Path
p = Path("shipping.py")
s = p.read_text()
s = s.replace("""    base = BASE[zone]
    if express:
        base = base * 2
    surcharge = max(Decimal(0), weight - 2) * PER_KG
    cost = base + surcharge
    if value > FREE_FROM and not express:""", """    base = BASE[zone.strip().upper()]
    surcharge = max(Decimal(0), weight - 2) * PER_KG
    cost = base + surcharge
    if express:
        cost = cost * 2
    if value >= FREE_FROM and not express:""")
p.write_text(s)
PY
python3 shipping.py orders.csv > shipping_report.csv
