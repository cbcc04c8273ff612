"""Every leaf key of the machine configuration, and another allowed value for each.

The key walk (``tests/test_config_keywalk.py``) changes each key of :class:`MachineConfig` in
turn and checks that the change reaches a result — the rule "no knob that silently does
nothing". The keys are derived from the pydantic models here, never listed by hand, so a key
added to the schema later is walked (and fails the walk until something reads it).

* :func:`leaf_keys` — dotted paths of every leaf setting; a dict-valued setting is one leaf per
  entry (``npu.vector.latency_cycles.softmax``): the entries of a ``dict[Literal[...], ...]``
  are the literals, those of a ``dict[str, ...]`` the entries of the given configuration.
* :func:`candidate_values` — other values a key may take, derived from its annotation and
  ``Field`` bounds (next ``Literal`` value, toggled bool, ``×2`` / ``÷2`` / ``±1`` within
  ``ge``/``gt``/``le``/``lt``, a power of two or the midpoint of the range for an unset
  optional, a shorter or longer tuple of literals, each element ``×2`` of a tuple of numbers,
  a marked string), most telling first. A ``Literal`` of one value has none.
* :func:`alternative` — the first candidate the configuration accepts (through
  :func:`archsim.config.load_config`, as ``--set`` would pass it), with the loaded config.
* :func:`override_text` — the ``--set key=value`` text of a value.

A leaf of the ``archsim`` layer: it imports :mod:`archsim.config` only.
"""
from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

import yaml
from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel

from archsim.config import MachineConfig, load_config
from archsim.errors import ConfigError

#: Marker appended to a string setting to make a different, still valid, string.
STRING_MARK = " (changed)"


@dataclass(frozen=True)
class LeafKey:
    """One leaf setting of the schema.

    Attributes:
        key: dotted path, e.g. ``memory.timing.tRCDRD`` or ``npu.vector.passes.gelu``.
        annotation: its type (for a dict entry: the dict's value type).
        bounds: ``(lower, lower_inclusive, upper, upper_inclusive)`` from the ``Field``'s
            ``ge``/``gt``/``le``/``lt`` (``None`` where unbounded).
        entry: True for an entry of a dict-valued setting.
    """

    key: str
    annotation: Any
    bounds: tuple[float | None, bool, float | None, bool]
    entry: bool = False


def _bounds(metadata: list) -> tuple[float | None, bool, float | None, bool]:
    lo = hi = None
    lo_inc = hi_inc = True
    for m in metadata:
        if isinstance(m, Ge):
            lo, lo_inc = m.ge, True
        elif isinstance(m, Gt):
            lo, lo_inc = m.gt, False
        elif isinstance(m, Le):
            hi, hi_inc = m.le, True
        elif isinstance(m, Lt):
            hi, hi_inc = m.lt, False
    return lo, lo_inc, hi, hi_inc


def _strip_optional(ann: Any) -> tuple[Any, bool]:
    """``(T, True)`` for ``T | None``, else ``(ann, False)``."""
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(ann)) == 2:
            return args[0], True
    return ann, False


def _model_of(ann: Any) -> type[BaseModel] | None:
    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


def leaf_keys(cfg: MachineConfig | None = None,
              model: type[BaseModel] = MachineConfig, prefix: str = "") -> list[LeafKey]:
    """Every leaf setting of ``model`` in declaration order (see the module docstring).

    Args:
        cfg: a configuration whose dict-valued ``dict[str, ...]`` settings give their entries
            (without it such a setting is one leaf).
        model: the pydantic model walked (default the whole machine).
        prefix: dotted prefix of ``model`` inside the machine.
    """
    out: list[LeafKey] = []
    for name, field in model.model_fields.items():
        dotted = f"{prefix}{name}"
        ann, _ = _strip_optional(field.annotation)
        sub = _model_of(ann)
        if sub is not None:
            out.extend(leaf_keys(cfg, sub, dotted + "."))
            continue
        bounds = _bounds(field.metadata)
        if typing.get_origin(ann) is dict:
            k_ann, v_ann = typing.get_args(ann)
            if typing.get_origin(k_ann) is Literal:
                entries = list(typing.get_args(k_ann))
            elif cfg is not None:
                entries = list(get_value(cfg, dotted))
            else:
                entries = []
            if entries:
                out.extend(LeafKey(f"{dotted}.{e}", v_ann, (None, True, None, True), True)
                           for e in entries)
                continue
        out.append(LeafKey(dotted, field.annotation, bounds))
    return out


def get_value(cfg: MachineConfig, key: str) -> Any:
    """The value of dotted ``key`` in ``cfg`` (``None`` for an unset optional or an absent dict
    entry).

    Raises:
        KeyError: ``key`` names no setting.
    """
    cur: Any = cfg
    for part in key.split("."):
        if isinstance(cur, BaseModel):
            if part not in type(cur).model_fields:
                raise KeyError(key)
            cur = getattr(cur, part)
        elif isinstance(cur, dict):
            cur = cur.get(part)
        else:
            raise KeyError(key)
    return cur


def _in_bounds(x: float, b: tuple[float | None, bool, float | None, bool]) -> bool:
    lo, lo_inc, hi, hi_inc = b
    if lo is not None and (x < lo or (x == lo and not lo_inc)):
        return False
    return not (hi is not None and (x > hi or (x == hi and not hi_inc)))


def _numbers(value: Any, kind: type, b: tuple) -> list:
    """Other numbers of type ``kind`` near ``value`` within bounds ``b``, most telling first:
    ×2, ÷2, +1, −1, and for a bounded float the midpoint towards the far bound. An unset
    optional (``None``: the model's own default applies) gets the midpoint and quartiles of a
    bounded float's range, or powers of two from 2 then the lower bound for an integer."""
    lo, _, hi, _ = b
    if value is None:
        if kind is float and lo is not None and hi is not None:
            raw = [(lo + hi) / 2, lo + (hi - lo) / 4, lo + 3 * (hi - lo) / 4]
        else:
            # powers of two from 2 first: 1 is often what an unset value already means
            # (one tensor-parallel device, one pass), then the lower bound
            start = max(2, int(lo or 1))
            top = int(hi) if hi is not None else 1 << 20
            raw, x = [], start
            while x <= top and len(raw) < 24:
                raw.append(x)
                x *= 2
            raw.append(max(1, int(lo or 1)))
    elif kind is float:
        raw = [value * 2, value / 2, value + 1, value - 1] if value else [1.0, 0.5]
        if lo is not None and hi is not None:
            raw.append((value + hi) / 2 if hi != value else (value + lo) / 2)
    else:
        raw = [value * 2, value // 2, value + 1, value - 1] if value else [1, 2]
    out = []
    for x in raw:
        x = kind(x)
        if x != value and _in_bounds(x, b) and x not in out:
            out.append(x)
    return out


def candidate_values(cfg: MachineConfig, leaf: LeafKey) -> list:
    """Other values ``leaf`` may take in ``cfg``, derived from its type and bounds, most
    telling first (none of them is ``cfg``'s value; whether the whole configuration accepts
    one is for :func:`alternative` to find out)."""
    value = get_value(cfg, leaf.key)
    ann, _ = _strip_optional(leaf.annotation)
    origin = typing.get_origin(ann)
    if ann is bool:
        return [not value]
    if origin is Literal:
        opts = list(typing.get_args(ann))
        i = opts.index(value) if value in opts else -1
        return [opts[(i + j) % len(opts)] for j in range(1, len(opts))]
    if origin is tuple:
        args = typing.get_args(ann)
        item = args[0]
        if typing.get_origin(item) is Literal:
            allowed = list(typing.get_args(item))
            v = tuple(value)
            out = [v[:n] for n in range(len(v) - 1, 0, -1)]
            out += [v + (x,) for x in allowed if x not in v]
            out += [(x,) for x in allowed if (x,) != v]
            return [list(c) for c in out]
        if item in (int, float):
            return [[item(x * 2) for x in value], [item(x / 2) for x in value]]
        return []
    if ann in (int, float):
        return _numbers(value, ann, leaf.bounds)
    if ann is str:
        return [value + STRING_MARK]
    return []


def override_text(key: str, value: Any) -> str:
    """``key=value`` with the value written as YAML (the form of ``--set``)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
    return f"{key}={text.removesuffix('...').strip()}"     # a scalar ends the document


def alternative(key: str, base: str = "neupims", context: tuple[str, ...] = (),
                candidates: list | None = None,
                companions: tuple[str, ...] = ()) -> tuple[Any, MachineConfig]:
    """Another allowed value of ``key`` and the configuration it gives.

    Args:
        key: a dotted leaf key (:func:`leaf_keys`).
        base: preset name or YAML file the walk starts from.
        context: ``--set`` overrides applied first (the setting under which ``key`` matters,
            e.g. ``memory.controller.page_policy=timeout`` for ``page_timeout_cycles``).
        candidates: values to try instead of :func:`candidate_values` (still in order).
        companions: ``--set`` overrides applied together with each candidate, for a key that a
            rule ties to others (``memory.org.columns`` with ``page_size_bytes``).

    Returns:
        ``(value, cfg)``: the first candidate that :func:`archsim.config.load_config` accepts
        after ``context``, and the loaded configuration.

    Raises:
        ConfigError: the context itself is rejected, ``key`` names no leaf, or no candidate is
            accepted (the message lists each candidate's rejection).
    """
    cfg = load_config(base, list(context))
    leaves = {lf.key: lf for lf in leaf_keys(cfg)}
    if key not in leaves:
        raise ConfigError(f"'{key}' is not a leaf key of the machine configuration")
    tried = candidates if candidates is not None else candidate_values(cfg, leaves[key])
    errors = []
    for v in tried:
        text = override_text(key, v)
        try:
            return v, load_config(base, [*context, text, *companions])
        except ConfigError as exc:
            errors.append(f"{text}: {exc}")
    raise ConfigError(f"no other allowed value of {key} under {base} {list(context)}: "
                      + ("; ".join(errors) if errors else "no candidate values"))


__all__ = ["LeafKey", "leaf_keys", "get_value", "candidate_values", "alternative",
           "override_text", "STRING_MARK"]
