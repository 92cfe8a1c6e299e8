"""Plain evaluation records into checked pandas tables, so every statistic reads the same columns.

A record is a dict or any object with the named attributes (a dataclass, a namedtuple). Bad input
raises ValueError naming the record (its position in the input) and the field.

Judged samples (misbehavior rates, judge agreement): policy, misbehavior, prefix_id, judge, repeated
(True/False; None when the judge failed) and, to pair judges on one continuation, sample (which of
the prefix's continuations it is).

Trials (benchmark scores, pass@k): task, reward (a float in [0, 1]; None when the trial errored),
error (a string, empty or None when there was none), and run or seed where runs are compared.
A trial is *errored* when its reward is None or its error is set: the kit's verifier scores an
unreadable reward 0 and says why in `error`, so such a 0 is no evidence about the policy.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

ERRORED_RULES = ("zero", "drop")
_MISSING = object()


def field(record: Any, name: str, index: int, what: str, default: Any = _MISSING) -> Any:
    """`record[name]` or `record.name`; a clear error naming the record when it has neither."""
    if isinstance(record, Mapping):
        value = record.get(name, default)
    else:
        value = getattr(record, name, default)
    if value is _MISSING:
        raise ValueError(f"{what} {index}: no field {name!r} (got {_describe(record)})")
    return value


def _describe(record: Any) -> str:
    if isinstance(record, Mapping):
        return f"fields {sorted(map(str, record))}"
    return f"a {type(record).__name__}"


def _as_list(records: Iterable[Any], what: str) -> list[Any]:
    if isinstance(records, (str, bytes, Mapping)):
        raise ValueError(f"{what}s: expected a sequence of records, got a {type(records).__name__}")
    out = list(records)
    if not out:
        raise ValueError(f"{what}s: none given (an empty input has no statistics)")
    return out


def samples_frame(samples: Iterable[Any], need_sample: bool = False) -> pd.DataFrame:
    """Judged samples as a table: policy, misbehavior, prefix_id, judge, repeated (True/False/None), sample."""
    rows = []
    for i, s in enumerate(_as_list(samples, "sample")):
        row = {k: field(s, k, i, "sample") for k in ("policy", "misbehavior", "prefix_id", "judge")}
        repeated = field(s, "repeated", i, "sample")
        if repeated is not None and not isinstance(repeated, (bool, np.bool_)):
            raise ValueError(f"sample {i}: 'repeated' must be True, False or None (judge failed), "
                             f"got {repeated!r}")
        row["repeated"] = None if repeated is None else bool(repeated)
        row["sample"] = field(s, "sample", i, "sample") if need_sample else field(s, "sample", i, "sample", None)
        rows.append(row)
    df = pd.DataFrame(rows, columns=["policy", "misbehavior", "prefix_id", "judge", "repeated", "sample"])
    df["repeated"] = df["repeated"].astype(object)
    return df


def trials_frame(trials: Iterable[Any], extra: Sequence[str] = ()) -> pd.DataFrame:
    """Trials as a table: task, reward (float or NaN), errored (bool), error, and the `extra` fields."""
    rows = []
    for i, t in enumerate(_as_list(trials, "trial")):
        reward = field(t, "reward", i, "trial")
        error = field(t, "error", i, "trial", None)
        if reward is not None:
            if not isinstance(reward, numbers.Real) or not math.isfinite(reward) or not 0.0 <= reward <= 1.0:
                raise ValueError(f"trial {i}: 'reward' must be a number in [0, 1] or None, got {reward!r}")
        if error is not None and not isinstance(error, str):
            raise ValueError(f"trial {i}: 'error' must be a string or None, got {error!r}")
        row = {"task": field(t, "task", i, "trial"), "reward": math.nan if reward is None else float(reward),
               "errored": reward is None or bool(error), "error": error or ""}
        for name in extra:
            row[name] = field(t, name, i, "trial")
        rows.append(row)
    return pd.DataFrame(rows, columns=["task", "reward", "errored", "error", *extra])


def apply_errored_rule(df: pd.DataFrame, errored: str) -> pd.DataFrame:
    """Errored trials counted as reward 0 ("zero", as Terminal-Bench's leaderboard does) or left out ("drop")."""
    if errored not in ERRORED_RULES:
        raise ValueError(f"errored={errored!r}: the rule must be one of {ERRORED_RULES}")
    if errored == "drop":
        return df[~df["errored"]].copy()
    out = df.copy()
    out.loc[out["errored"], "reward"] = 0.0
    return out
