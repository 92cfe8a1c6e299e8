"""Runs every report once; used as a smoke test."""

from app.cli.export import export_lines
from app.report import stock_report
from app.sync import pending_units
from tools.migrate import migrate

if __name__ == "__main__":
    for line in (stock_report(), pending_units(), export_lines(), migrate()):
        print(line)
