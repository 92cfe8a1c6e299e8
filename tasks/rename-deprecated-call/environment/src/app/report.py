"""Stock report."""

from mylib import records


def stock_report():
    warm = records.prefetch_data("stock", "orders")
    stock = records.fetch_data("stock")
    total = sum(q for _, q in stock)
    return f"stock items={len(stock)} units={total} warmed={sum(warm.values())}"
