#!/usr/bin/env python3
"""Takes one measurement and writes it as a new report in /app/reports (name: time + random suffix)."""

import datetime
import os
import random
import string
from pathlib import Path

out = Path("/app/reports")
out.mkdir(exist_ok=True)
now = datetime.datetime.now(datetime.timezone.utc)
suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=6))
path = out / f"report_{now:%Y%m%dT%H%M%S%f}_{suffix}.txt"
path.write_text(
    f"generated: {now.isoformat()}\n"
    f"pid: {os.getpid()}\n"
    "baseline value: 500\n"
    f"value: {random.randint(1, 1000)}\n"
    f"items: {random.randint(1, 50)}\n"
)
print(f"wrote {path}")
