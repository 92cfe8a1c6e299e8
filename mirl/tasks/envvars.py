"""Harbor's `env` tables: values are templates resolved from the host's environment when a session starts.

`${VAR}` takes the host's VAR (an error when it is unset), `${VAR:-default}` falls back to the default;
other text is kept as written. Resolving at start rather than at load keeps host secrets out of the
Task record, which is logged and written into run records.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class MissingVariable(ValueError):
    """A template names a host variable that is unset and has no default."""


def resolve(templates: Mapping[str, str], host: Mapping[str, str] | None = None, what: str = "env") -> dict[str, str]:
    """The table's values with every `${VAR}` / `${VAR:-default}` replaced from `host` (os.environ by default)."""
    host = os.environ if host is None else host
    missing: list[str] = []

    def repl(m: re.Match) -> str:
        if m.group(1) in host:
            return host[m.group(1)]
        if m.group(2) is not None:
            return m.group(2)
        missing.append(m.group(1))
        return ""

    out = {key: _TEMPLATE.sub(repl, str(value)) for key, value in templates.items()}
    if missing:
        names = ", ".join(sorted(set(missing)))
        raise MissingVariable(f"{what} needs the host variable(s) {names}, which are not set (and have no ${{VAR:-default}})")
    return out
