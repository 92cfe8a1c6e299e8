#!/bin/bash
python3 - <<'PY'
import yaml

def flatten(path, value, out):
    if isinstance(value, dict):
        for key, child in value.items():
            flatten(path + [str(key)], child, out)
        return
    key = "_".join(path).upper().replace("-", "_")
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, list):
        text = ",".join(str(v) for v in value)
    else:
        text = str(value)
    out.append(f"{key}={text}")

lines = []
flatten([], yaml.safe_load(open("/app/config.yaml")), lines)
open("/app/.env", "w").write("\n".join(sorted(lines)) + "\n")
PY
cat /app/.env
