#!/bin/bash
# Builds /app/repo with a fixed history (fixed authors and dates, so hashes are stable).
set -euo pipefail
export GIT_AUTHOR_NAME="Sam Okafor" GIT_AUTHOR_EMAIL="sam@example.com"
export GIT_COMMITTER_NAME="Sam Okafor" GIT_COMMITTER_EMAIL="sam@example.com"
n=0
commit() {  # commit MESSAGE
  n=$((n + 1))
  export GIT_AUTHOR_DATE="2024-05-$(printf %02d "$n")T09:30:00+00:00" GIT_COMMITTER_DATE="2024-05-$(printf %02d "$n")T09:30:00+00:00"
  git add -A && git commit -q -m "$1"
}
mkdir -p /app/repo && cd /app/repo
git init -q -b main
git config user.name "Sam Okafor" && git config user.email sam@example.com

printf '__pycache__/\n.pytest_cache/\n*.pyc\n' > .gitignore
printf '# pricing\n\nPrice helpers for the shop.\n' > README.md
commit "Initial commit"

cat > pricing.py <<'PY'
"""Price calculations for the shop."""

TAX_RATE = 0.20


def round_price(value):
    """Round to cents, halves up (the nudge avoids binary float surprises like 2.675)."""
    return round(value + 1e-9, 2)


def with_tax(net):
    return round_price(net * (1 + TAX_RATE))


def apply_discount(price, percent):
    if not 0 <= percent <= 100:
        raise ValueError("percent must be between 0 and 100")
    return round_price(price * (1 - percent / 100))
PY
cat > test_pricing.py <<'PY'
import pytest

from pricing import apply_discount, round_price, with_tax


def test_round_price():
    assert round_price(2.675) == 2.68
    assert round_price(1.004) == 1.0


def test_with_tax():
    assert with_tax(9.99) == 11.99


def test_apply_discount():
    assert apply_discount(19.99, 15) == 16.99
    with pytest.raises(ValueError):
        apply_discount(10, 120)
PY
commit "Add pricing module with tests"

printf '\n## Testing\n\n    python3 -m pytest -q\n' >> README.md
commit "Document how to run the tests"
git tag v1.0

cat >> pricing.py <<'PY'


def bulk_discount(unit_price, quantity):
    """10% off from 10 units, 20% off from 50 units."""
    percent = 20 if quantity >= 50 else 10 if quantity >= 10 else 0
    return apply_discount(unit_price * quantity, percent)
PY
cat >> test_pricing.py <<'PY'


def test_bulk_discount():
    from pricing import bulk_discount
    assert bulk_discount(2.5, 4) == 10.0
    assert bulk_discount(2.5, 10) == 22.5
    assert bulk_discount(1.15, 50) == 46.0
PY
commit "Add bulk discount"

python3 - <<'PY'
from pathlib import Path
p = Path("pricing.py")
p.write_text(p.read_text().replace(
    '''    """Round to cents, halves up (the nudge avoids binary float surprises like 2.675)."""
    return round(value + 1e-9, 2)''',
    '''    """Round to cents."""
    return int(value * 100) / 100'''))
PY
commit "Simplify rounding helper"

cat > formatting.py <<'PY'
"""Human-readable prices."""

SYMBOLS = {"EUR": "€", "USD": "$", "GBP": "£"}


def format_price(value, currency="EUR"):
    return f"{SYMBOLS[currency]}{value:,.2f}"
PY
cat > test_formatting.py <<'PY'
from formatting import format_price


def test_format_price():
    assert format_price(1234.5) == "€1,234.50"
    assert format_price(3, "USD") == "$3.00"
PY
commit "Add currency formatting"

sed -i 's/^TAX_RATE = 0.20$/TAX_RATE = 0.21/' pricing.py
sed -i 's/    assert with_tax(9.99) == 11.99/    assert with_tax(9.99) == 12.09/' test_pricing.py
commit "Raise tax rate to 21%"

python3 - <<'PY'
from pathlib import Path
p = Path("pricing.py")
p.write_text(p.read_text().replace(
    '''def with_tax(net):
    return''',
    '''def with_tax(net):
    if net < 0:
        raise ValueError("net price cannot be negative")
    return'''))
t = Path("test_pricing.py")
t.write_text(t.read_text() + '''

def test_with_tax_rejects_negative():
    with pytest.raises(ValueError):
        with_tax(-1)
''')
PY
commit "Reject negative net prices"

printf '# Changelog\n\n## unreleased\n- bulk discount\n- currency formatting\n- tax rate 21%%\n' > CHANGELOG.md
commit "Add changelog"

cat > export.py <<'PY'
"""Export a price list as CSV lines: name,net,gross."""
from pricing import with_tax


def export_lines(items):
    return [f"{name},{net:.2f},{with_tax(net):.2f}" for name, net in items]
PY
cat > test_export.py <<'PY'
from export import export_lines


def test_export_lines():
    assert export_lines([("tea", 4.5), ("mug", 8.25)]) == ["tea,4.50,5.45", "mug,8.25,9.98"]
PY
commit "Add price list export"
