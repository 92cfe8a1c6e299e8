"""Typed parameters: one dataclass per stage, loaded from params YAML plus overrides.

Notebooks receive flat literals from papermill (which may coerce types); `load_params` turns them
into a typed object, rejecting unknown keys, wrong types and values out of range with a message
naming the key, so a typo in a params file fails at once instead of silently running the default.
Every field carries its help text in `field(metadata={"help": ...})`, and a number's range where
values outside it mean nothing: `"min"` / `"max"` (inclusive) and `"above"` (exclusive), e.g.
`metadata={"help": ..., "min": 1}` for a count, `{"above": 0}` for a timeout, `{"min": 0, "max": 1}`
for a share. On a list or mapping field the range bounds each item or value.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


class ParamsError(ValueError):
    """A params file or override that does not fit the stage's config dataclass."""


BOUNDS = ("min", "above", "max")  # metadata keys of a field's range


def range_text(metadata: Any) -> str:
    """The range a field's metadata allows, in words ("at least 1", "above 0 and at most 1"); "" if none."""
    parts = []
    if "min" in metadata:
        parts.append(f"at least {metadata['min']}")
    if "above" in metadata:
        parts.append(f"above {metadata['above']}")
    if "max" in metadata:
        parts.append(f"at most {metadata['max']}")
    return " and ".join(parts)


def check_range(key: str, value: Any, metadata: Any) -> None:
    """A ParamsError naming the key, the value and the range when a number lies outside its field's
    range (`min`, `above`, `max` in the field's metadata); each item of a list, each value of a mapping."""
    if not any(b in metadata for b in BOUNDS):
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_range(f"{key}[{i}]", v, metadata)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            check_range(f"{key}[{k!r}]", v, metadata)
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return  # None (a field's "empty") and non-numbers have no range
    if (("min" in metadata and not value >= metadata["min"])
            or ("above" in metadata and not value > metadata["above"])
            or ("max" in metadata and not value <= metadata["max"])):
        raise ParamsError(f"{key}: must be {range_text(metadata)}, got {value!r}")


def read_yaml(path: str | Path, what: str = "params file") -> Any:
    """A YAML file's value, or a ParamsError naming the file: missing, or not valid YAML."""
    path = Path(path)
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ParamsError(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise ParamsError(f"{path}: a directory, not a {what}") from None
    except OSError as e:
        raise ParamsError(f"{path}: cannot read the {what}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ParamsError(f"{path}: not a text file (byte {e.start} is not UTF-8)") from None
    except yaml.YAMLError as e:
        raise ParamsError(f"{path}: not valid YAML: {e}") from None


def check_ranges(obj: Any, prefix: str = "") -> None:
    """`check_range` on every field of a dataclass object made in code rather than loaded (nested ones too)."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        check_range(prefix + f.name, value, f.metadata)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_ranges(value, f"{prefix}{f.name}.")


def _coerce(key: str, value: Any, tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        if type(value) in args:  # already one of the types: kept as it is (8 stays 8 in `str | int`)
            return value
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(key, value, arg)
            except ParamsError as e:
                errors.append(str(e))
        raise ParamsError(errors[0] if errors else f"{key}: cannot be {value!r}")
    if origin is typing.Literal:
        if value not in typing.get_args(tp):
            raise ParamsError(f"{key}: must be one of {list(typing.get_args(tp))}, got {value!r}")
        return value
    if origin in (list, tuple):
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ParamsError(f"{key}: must be a list, got {type(value).__name__} {value!r}")
        (item_tp, *_) = typing.get_args(tp) or (Any,)
        return [_coerce(f"{key}[{i}]", v, item_tp) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ParamsError(f"{key}: must be a mapping, got {type(value).__name__} {value!r}")
        key_tp, value_tp = typing.get_args(tp) or (Any, Any)
        return {_coerce(f"{key}[{k!r}] (a key)", k, key_tp): _coerce(f"{key}[{k!r}]", v, value_tp)
                for k, v in value.items()}
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        raise ParamsError(f"{key}: must be true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ParamsError(f"{key}: must be an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        raise ParamsError(f"{key}: must be an integer, got {value!r}")
    if tp is float:
        if isinstance(value, bool):
            raise ParamsError(f"{key}: must be a number, got {value!r}")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ParamsError(f"{key}: must be a number, got {value!r}")
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ParamsError(f"{key}: must be a string, got {type(value).__name__} {value!r}")
    if tp is Path:
        return Path(str(value))
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ParamsError(f"{key}: must be a mapping, got {value!r}")
        return build(tp, value, prefix=f"{key}.")
    return value


def build(cls: type[T], values: dict[str, Any], prefix: str = "") -> T:
    """Make `cls` from a mapping, checking every key and type; errors name the offending key."""
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ParamsError(
            f"unknown parameter(s) {', '.join(prefix + k for k in unknown)} for {cls.__name__}; "
            f"known: {', '.join(sorted(known))}"
        )
    kwargs = {}
    for name, value in values.items():
        kwargs[name] = _coerce(prefix + name, value, hints[name])
        check_range(prefix + name, kwargs[name], known[name].metadata)
    try:
        return cls(**kwargs)
    except ParamsError as e:  # a dataclass's own checks: say where in the params it sits
        if prefix and not str(e).startswith(prefix):
            raise ParamsError(f"{prefix.rstrip('.')}: {e}") from None
        raise


def load_params(cls: type[T], path: str | Path | None = None, overrides: dict[str, Any] | None = None,
                section: str | None = None) -> T:
    """Load `cls` from a YAML file (optionally one top-level section of it), then apply overrides."""
    values: dict[str, Any] = {}
    if path is not None:
        data = read_yaml(path) or {}
        if not isinstance(data, dict):
            raise ParamsError(f"{path}: must be a mapping of parameter names to values")
        if section is not None:
            data = data.get(section, {}) or {}
        values.update(data)
    values.update(overrides or {})
    return build(cls, values)


def help_text(cls: type) -> dict[str, str]:
    """Field name -> help text, for CLIs and docs."""
    return {f.name: f.metadata.get("help", "") for f in dataclasses.fields(cls)}


def to_dict(obj: Any) -> dict[str, Any]:
    return dataclasses.asdict(obj)
