"""Watches the named workers and logs which of them are alive, every few seconds."""
import argparse
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--watch", required=True, help="comma-separated worker names")
names = parser.parse_args().watch.split(",")


def running():
    alive = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        for i, arg in enumerate(argv[:-1]):
            if arg == b"--name":
                alive.add(argv[i + 1].decode())
    return alive


while True:
    alive = running()
    print("monitor: " + " ".join(f"{n}={'up' if n in alive else 'down'}" for n in names), flush=True)
    time.sleep(5)
