"""Checks /app/admin_emails.txt lists the active admins' emails, sorted."""

import json
from pathlib import Path

OUT = Path("/app/admin_emails.txt")
USERS = json.loads(Path("/app/users.json").read_text())
EXPECTED = sorted(u["email"] for u in USERS if u["active"] is True and u["role"] == "admin")


def test_data_untouched():
    assert len(USERS) == 26 and len(EXPECTED) == 8


def test_emails_sorted():
    assert OUT.is_file(), f"{OUT} was not created"
    got = [l.strip() for l in OUT.read_text().splitlines() if l.strip()]
    assert got == EXPECTED
