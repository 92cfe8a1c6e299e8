#!/bin/bash
set -euo pipefail
cd /app
python3 - <<'PY'
from pathlib import Path
p = Path("textkit/slug.py")
s = p.read_text()
s = s.replace('''    text = unicodedata.normalize("NFKD", text)
    text = text.lower()
    slug = re.sub(r"[^a-z0-9]", "-", text)
    if max_length is not None:
        slug = slug[:max_length]
    return slug''', '''    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if max_length is not None:
        slug = slug[:max_length].rstrip("-")
    return slug''')
p.write_text(s)
PY
python3 -m pytest -q -p no:cacheprovider
