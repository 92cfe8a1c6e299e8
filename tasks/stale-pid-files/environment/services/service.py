"""A stand-in background service: reads conf/<name>.conf, then idles until stopped."""
import argparse
import sys
import time
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--name", required=True)
name = parser.parse_args().name
conf = Path(__file__).parent / "conf" / f"{name}.conf"
if not conf.is_file():
    sys.exit(f"{name}: configuration {conf} not found, exiting")
print(f"{name}: started with {conf.read_text().strip()}", flush=True)
while True:
    time.sleep(10)
