"""The report exists at the requested path and summarises every stock file with threshold 5."""
import csv
from collections import defaultdict
from pathlib import Path

REPORT = Path("/app/reports/inventory.txt")


def expected():
    files = sorted(Path("/app/stock").glob("*.csv"))
    totals = defaultdict(int)
    for path in files:
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                totals[row["sku"]] += int(row["quantity"])
    lines = [f"inventory report ({len(files)} files, {len(totals)} skus)"]
    lines += [f"{sku} {qty}" for sku, qty in sorted(totals.items())]
    low = sorted(sku for sku, qty in totals.items() if qty < 5)
    lines.append("low stock: " + (", ".join(low) if low else "none"))
    return lines


def test_report_contents():
    assert REPORT.is_file(), "no report at /app/reports/inventory.txt"
    assert REPORT.read_text().strip().splitlines() == expected()


def test_tool_configured():
    settings = Path("/app/inventory/settings.ini")
    assert settings.is_file()
    assert "CHANGE_ME" not in settings.read_text()
