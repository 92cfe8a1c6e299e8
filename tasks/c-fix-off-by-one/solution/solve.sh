#!/bin/bash
# Three bugs: encode never writes the last run, its buffer has no room for the
# terminating NUL (overflow when every run has length 1, and for empty input),
# and decode writes each character count+1 times (overflowing its buffer).
set -euo pipefail
cd /app
python3 - <<'PY'
from pathlib import Path
p = Path("src/rle.c")
s = p.read_text()
s = s.replace("char *out = malloc(2 * len);", "char *out = malloc(2 * len + 1);")
s = s.replace("""        run = 1;
    }
    out[pos] = '\\0';""", """        run = 1;
    }
    if (len > 0)
        pos += sprintf(out + pos, "%zu%c", run, s[len - 1]);
    out[pos] = '\\0';""")
s = s.replace("for (size_t k = 0; k <= n; k++)", "for (size_t k = 0; k < n; k++)")
p.write_text(s)
PY
make -B
