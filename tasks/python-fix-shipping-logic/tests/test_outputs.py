"""The fixed calculator follows the pricing rules, on the shipped orders and on unseen ones."""
import csv
import io
import random
import subprocess
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

APP = Path("/app")
BASE = {"A": Decimal("5.00"), "B": Decimal("7.50"), "C": Decimal("10.00")}


def expected_report(csv_text):
    lines, total = ["order_id,cost"], Decimal(0)
    for row in csv.DictReader(io.StringIO(csv_text)):
        express = row["express"].strip().lower() == "yes"
        cost = BASE[row["zone"].strip().upper()] + max(Decimal(0), Decimal(row["weight_kg"]) - 2) * Decimal("1.20")
        if express:
            cost *= 2
        elif Decimal(row["order_value"]) >= Decimal("100.00"):
            cost = Decimal(0)
        cost = cost.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
        total += cost
        lines.append(f"{row['order_id']},{cost:.2f}")
    lines.append(f"TOTAL,{total:.2f}")
    return lines


def run_script(path):
    out = subprocess.run(["python3", str(APP / "shipping.py"), str(path)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()


def test_report_file():
    report = APP / "shipping_report.csv"
    assert report.is_file(), "missing /app/shipping_report.csv"
    got = [line.strip() for line in report.read_text().strip().splitlines()]
    assert got == expected_report((APP / "orders.csv").read_text())


def test_script_on_unseen_orders(tmp_path):
    rng = random.Random(2024)
    rows = ["order_id,zone,weight_kg,order_value,express",
            "1,c,2.00,100.00,no", "2,B,2.125,10.00,no", "3,a,10.5,100.00,yes", "4,A,2.01,99.99,no"]
    for i in range(5, 60):
        rows.append(f"{i},{rng.choice('ABCabc')},{rng.choice(['0.4','2','2.375','3.5','6.125','15'])},"
                    f"{rng.choice(['5.00','99.99','100.00','100.01','480.00'])},{rng.choice(['yes','no'])}")
    text = "\n".join(rows) + "\n"
    path = tmp_path / "orders.csv"
    path.write_text(text)
    assert run_script(path) == expected_report(text)
