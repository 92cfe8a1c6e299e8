"""One-off migration helper."""

from mylib import records as r


def migrate():
    moved = [item for item, _ in r.fetch_data("returns")]
    return f"migrate moved={','.join(moved)}"
