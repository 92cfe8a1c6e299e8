"""A stand-in queue worker: logs a heartbeat every few seconds until it is stopped."""
import argparse
import signal
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--name", required=True)
name = parser.parse_args().name


def stop(signum, frame):
    print(f"{name}: stopping on signal {signum}", flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, stop)
print(f"{name}: started", flush=True)
while True:
    time.sleep(5)
    print(f"{name}: heartbeat", flush=True)
