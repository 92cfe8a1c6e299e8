"""Summarise stock CSV files (sku,warehouse,quantity) into a plain-text inventory report."""
import configparser
import csv
import sys
from collections import defaultdict
from pathlib import Path

CONFIG = Path(__file__).with_name("settings.ini")
PLACEHOLDER = "CHANGE_ME"


def load_settings() -> configparser.ConfigParser:
    if not CONFIG.is_file():
        sys.exit(f"error: configuration file {CONFIG} not found")
    cfg = configparser.ConfigParser()
    cfg.read(CONFIG)
    for section, key in (("paths", "data_dir"), ("paths", "output"), ("report", "low_stock_threshold")):
        value = cfg.get(section, key, fallback=None)
        if value is None:
            sys.exit(f"error: {CONFIG}: missing setting {section}.{key}")
        if value.strip() == PLACEHOLDER:
            sys.exit(f"error: {CONFIG}: setting {section}.{key} is still {PLACEHOLDER}")
    return cfg


def main() -> None:
    cfg = load_settings()
    data_dir = Path(cfg.get("paths", "data_dir"))
    output = Path(cfg.get("paths", "output"))
    threshold = cfg.getint("report", "low_stock_threshold")
    files = sorted(data_dir.glob("*.csv"))
    if not files:
        sys.exit(f"error: no .csv files in {data_dir}")
    totals: dict[str, int] = defaultdict(int)
    for path in files:
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                totals[row["sku"]] += int(row["quantity"])
    lines = [f"inventory report ({len(files)} files, {len(totals)} skus)"]
    lines += [f"{sku} {qty}" for sku, qty in sorted(totals.items())]
    low = sorted(sku for sku, qty in totals.items() if qty < threshold)
    lines.append("low stock: " + (", ".join(low) if low else "none"))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("\n".join(lines) + "\n")
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
