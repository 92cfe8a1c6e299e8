"""Keeps the product cache warm (stand-in: wakes up every few seconds)."""
import time

while True:
    time.sleep(5)
