"""Record loading. `fetch_data` is the old name of `load_records` and is deprecated."""

import warnings

_STORE = {
    "stock": [("widget", 12), ("gadget", 3), ("gizmo", 40)],
    "orders": [("widget", 2), ("gizmo", 5)],
    "returns": [("gadget", 1)],
}


def load_records(name):
    """Return the records of the named table as a list of (item, quantity) pairs."""
    return list(_STORE[name])


def fetch_data(name):
    """Deprecated alias of load_records, kept for third-party code."""
    warnings.warn("fetch_data is deprecated; use load_records", DeprecationWarning, stacklevel=2)
    return load_records(name)


def fetch_data_async(name, callback):
    """Load a table and hand it to callback (a separate API, not deprecated)."""
    callback(load_records(name))


def prefetch_data(*names):
    """Warm the cache for several tables (a separate API, not deprecated)."""
    return {n: len(_STORE[n]) for n in names}
