#!/bin/bash
python3 - <<'PY'
import json

def merge(base, over):
    out = dict(base)
    for key, value in over.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        elif isinstance(value, dict):
            out[key] = merge({}, value)  # drops nested nulls too
        else:
            out[key] = value
    return out

result = {}
for name in ("defaults", "site", "local"):
    with open(f"/app/config/{name}.json") as f:
        result = merge(result, json.load(f))
with open("/app/config/merged.json", "w") as f:
    json.dump(result, f, indent=2, sort_keys=True)
PY
