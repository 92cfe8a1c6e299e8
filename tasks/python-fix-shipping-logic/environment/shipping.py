"""Compute shipping costs for a CSV of orders: python3 shipping.py ORDERS_CSV > report.csv"""
import csv
import sys
from decimal import ROUND_HALF_UP, Decimal

BASE = {"A": Decimal("5.00"), "B": Decimal("7.50"), "C": Decimal("10.00")}
PER_KG = Decimal("1.20")
FREE_FROM = Decimal("100.00")
CENT = Decimal("0.01")


def order_cost(zone: str, weight: Decimal, value: Decimal, express: bool) -> Decimal:
    base = BASE[zone]
    if express:
        base = base * 2
    surcharge = max(Decimal(0), weight - 2) * PER_KG
    cost = base + surcharge
    if value > FREE_FROM and not express:
        cost = Decimal(0)
    return cost.quantize(CENT, rounding=ROUND_HALF_UP)


def main(path: str) -> None:
    total = Decimal(0)
    print("order_id,cost")
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            cost = order_cost(row["zone"], Decimal(row["weight_kg"]), Decimal(row["order_value"]),
                              row["express"].strip().lower() == "yes")
            total += cost
            print(f"{row['order_id']},{cost:.2f}")
    print(f"TOTAL,{total:.2f}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 shipping.py ORDERS_CSV")
    main(sys.argv[1])
