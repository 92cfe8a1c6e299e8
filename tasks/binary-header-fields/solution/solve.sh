#!/bin/bash
xxd /app/data/telemetry.bin | head -4
python3 - <<'PY'
import json
import struct

data = open("/app/data/telemetry.bin", "rb").read()
magic, version, _flags, count, header_size, device = struct.unpack_from("<4sHHII16s", data, 0)
records = [struct.unpack_from("<IHHf", data, header_size + 12 * i) for i in range(count)]
out = {
    "magic": magic.decode("ascii"),
    "version": version,
    "record_count": count,
    "device": device.rstrip(b"\0").decode("ascii"),
    "first_timestamp": records[0][0],
    "last_timestamp": records[-1][0],
    "max_value": round(max(r[3] for r in records), 2),
}
json.dump(out, open("/app/header.json", "w"), indent=2)
print(out)
PY
