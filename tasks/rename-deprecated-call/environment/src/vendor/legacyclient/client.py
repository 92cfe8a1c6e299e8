"""Vendored legacy client (upstream code, do not edit)."""

from mylib import records


def legacy_dump():
    return [row for row in records.fetch_data("stock")]
