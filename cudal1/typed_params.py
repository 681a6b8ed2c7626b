"""YAML data into frozen dataclasses, every key and type checked on the way (cudal1.config's sections and
the nested dataclasses they hold). Every mistake stops with a :class:`ParamsError` that names the key
(``augment.teachers[0].temperature``), what was expected and how to fix it; lists become tuples so a
section stays hashable."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal


class ParamsError(ValueError):
    """The params file is wrong; the message names the key and the fix."""


def build(cls: type, raw: Any, where: str) -> Any:
    """Construct dataclass ``cls`` from YAML data, checking every key and type on the way."""
    if not isinstance(raw, Mapping):
        raise ParamsError(f"{where}: expected a mapping with keys {_keys(cls)}, got {raw!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    for key in raw:
        if key not in names:
            raise ParamsError(
                f"{where}.{key}: unknown key in section '{where}'; valid keys: {', '.join(names)}. "
                "Fix the spelling or remove it."
            )
    kwargs = {key: _coerce(hints[key], value, f"{where}.{key}") for key, value in raw.items()}
    missing = [f.name for f in dataclasses.fields(cls) if f.init and f.name not in kwargs and _required(f)]
    if missing:
        raise ParamsError(f"{where}: missing required key(s) {', '.join(missing)}")
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:
        raise ParamsError(f"{where}: {exc}") from exc


def _required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _keys(cls: type) -> str:
    return ", ".join(f.name for f in dataclasses.fields(cls) if f.init)


def _type_name(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is type(None):
        return "null"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if origin is tuple:
        return f"a list of {_type_name(args[0])}"
    if origin is dict:
        return f"a mapping of {_type_name(args[1])}"
    if dataclasses.is_dataclass(tp):
        return f"a mapping with keys {_keys(tp)}"
    return getattr(tp, "__name__", str(tp))


def _coerce(tp: Any, value: Any, where: str) -> Any:
    """Check ``value`` against the annotation ``tp``; lists become tuples so configs stay hashable."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)

    def wrong() -> ParamsError:
        return ParamsError(f"{where}: expected {_type_name(tp)}, got {value!r} ({type(value).__name__})")

    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None:
            if type(None) in args:
                return None
            raise wrong()
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, where)
            except ParamsError:
                continue
        raise wrong()
    if origin is Literal:
        if value in args:
            return value
        raise wrong()
    if dataclasses.is_dataclass(tp):
        return build(tp, value, where)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise wrong()
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise wrong()
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise wrong()
    if tp is str:
        if isinstance(value, str):
            return value
        raise wrong()
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise wrong()
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise wrong()
        return tuple(_coerce(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True)))
    if origin is dict:
        if not isinstance(value, Mapping):
            raise wrong()
        return {_coerce(args[0], k, where): _coerce(args[1], v, f"{where}.{k}") for k, v in value.items()}
    raise ParamsError(f"{where}: no rule to check type {tp!r} (a bug in cudal1.typed_params)")
