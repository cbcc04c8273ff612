"""Design points: what one evaluation runs, its identity (config hash), and point generation.

A *point* is a choice of a value for every swept parameter. :func:`resolve_point` turns it into
a :class:`Point`: the base config with the spec's fixed overrides and the point's config
parameters applied and validated by :func:`archsim.config.load_config` (so a point inherits the
config's file/line/key error messages), plus the point's workload. The point's ``key`` is the
sha256 of the canonical JSON of (effective machine config, workload, evaluator): two
parameterisations that produce the same machine and workload are the same point, and a resumed
sweep recognises finished points by it. An invalid config gives a :class:`Point` with ``error``
set (recorded as failed, never run), keyed by the hash of its raw inputs instead.

:func:`grid_points` and :func:`random_points` generate parameter dicts deterministically
(spec order; ``numpy.random.default_rng(seed)``).
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from archsim.config import load_config, parse_override
from archsim.errors import ConfigError
from archsim.energy.area import static_metrics
from archsim.sweep.errors import SweepSpecError
from archsim.sweep.spec import WORKLOAD_KEYS, RangeSpec, SweepSpec, grid_size, range_values


@dataclass(frozen=True)
class Point:
    """One design point, self-contained so that any worker can evaluate it (no file access).

    Attributes:
        key: config hash (hex sha256), the point's identity in the results DB.
        params: the swept values ``{parameter: value}`` (JSON scalars), in spec order.
        workload: ``{model, batch, dataset, seed, system, phase}``.
        config: the effective machine config (``MachineConfig.to_dict()``), or ``None`` if the
            config is invalid.
        evaluator: ``module:function`` that evaluates it.
        static: metrics known without simulation (area proxy, capacity; see
            :func:`archsim.energy.area.static_metrics`).
        error: why the point cannot run (invalid config); ``None`` when it can.
    """

    key: str
    params: dict[str, Any]
    workload: dict[str, Any]
    config: dict[str, Any] | None
    evaluator: str
    static: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def canonical_json(obj: Any) -> str:
    """Deterministic JSON (sorted keys, no spaces) used for hashing."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def point_hash(obj: Any) -> str:
    """Hex sha256 of :func:`canonical_json` of ``obj``."""
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()


def format_override(key: str, value: Any) -> str:
    """``key=value`` text for :func:`archsim.config.load_config` whose YAML parse gives back
    exactly ``value`` (floats always carry a ``.`` so that YAML 1.1 reads them as floats).

    Raises:
        SweepSpecError: a value that cannot be written so that it reads back identically.
    """
    if isinstance(value, float) and math.isfinite(value):
        text = json.dumps(value)
        if "." not in text and "e" in text:
            mant, _, exp = text.partition("e")
            text = f"{mant}.0e{exp if exp[0] in '+-' else '+' + exp}"
    else:
        text = json.dumps(value)
    out = f"{key}={text}"
    _, back = parse_override(out)
    if back != value or type(back) is not type(value):
        raise SweepSpecError(f"parameter {key}: value {value!r} cannot be passed as an override "
                             f"(reads back as {back!r})")
    return out


def split_params(params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a point's parameters into (config keys, workload keys)."""
    cfg = {k: v for k, v in params.items() if k not in WORKLOAD_KEYS}
    wl = {k: v for k, v in params.items() if k in WORKLOAD_KEYS}
    return cfg, wl


def resolve_point(spec: SweepSpec, params: dict[str, Any]) -> Point:
    """Build the :class:`Point` of ``params``: validate its config with ``load_config`` (base,
    then the spec's ``set``, then the point's config parameters) and compute its key and static
    metrics. Never raises for a bad value: the point comes back with ``error`` set."""
    cfg_params, wl_params = split_params(params)
    # keep_channels only when set, so that the keys of existing results stay the same
    workload = {**spec.workload.model_dump(
        exclude=set() if spec.workload.keep_channels else {"keep_channels"}), **wl_params}
    base = spec.base_for(workload["system"])
    overrides = [format_override(k, v) for k, v in spec.set_.items()]
    overrides += [format_override(k, v) for k, v in cfg_params.items()]
    try:
        cfg = load_config(base, overrides)
    except ConfigError as exc:
        key = point_hash({"invalid": {"base": base, "overrides": overrides},
                          "workload": workload, "evaluator": spec.evaluator})
        return Point(key, dict(params), workload, None, spec.evaluator, {}, str(exc))
    config = cfg.to_dict()
    key = point_hash({"config": config, "workload": workload, "evaluator": spec.evaluator})
    return Point(key, dict(params), workload, config, spec.evaluator,
                 static_metrics(cfg))


def _values(val: list[Any] | RangeSpec) -> list[Any]:
    return list(val) if isinstance(val, list) else range_values(val)


def grid_points(spec: SweepSpec) -> Iterator[dict[str, Any]]:
    """Every combination of the parameters' values; the last parameter varies fastest.

    A spec without parameters yields one empty point (the base machine)."""
    keys = list(spec.parameters)
    for combo in itertools.product(*(_values(spec.parameters[k]) for k in keys)):
        yield dict(zip(keys, combo))


def _draw(val: list[Any] | RangeSpec, rng: np.random.Generator) -> Any:
    """One random value of a parameter (uniform over a list; uniform or log-uniform, and on
    the step lattice when given, over a range)."""
    if isinstance(val, list):
        return val[int(rng.integers(len(val)))]
    if val.step is not None or val.is_int:
        vals = range_values(val)
        return vals[int(rng.integers(len(vals)))]
    if val.log:
        return float(math.exp(rng.uniform(math.log(val.low), math.log(val.high))))
    return float(rng.uniform(val.low, val.high))


def random_points(spec: SweepSpec) -> list[dict[str, Any]]:
    """``search.count`` random points drawn with ``search.seed``.

    When every parameter is discrete (lists, integer or stepped ranges) the points are drawn
    without replacement from the grid (all of it when ``count`` ≥ its size); otherwise each
    parameter is drawn independently and duplicates are dropped.
    """
    count = spec.search.count or 0
    rng = np.random.default_rng(spec.search.seed)
    params = spec.parameters
    discrete = all(isinstance(v, list) or v.step is not None or v.num is not None or v.is_int
                   for v in params.values())
    if discrete:
        axes = [(k, _values(v)) for k, v in params.items()]
        n = grid_size(spec)
        idx = np.sort(rng.choice(n, size=min(count, n), replace=False)) if n > count \
            else np.arange(n)
        out = []
        for flat in idx.tolist():
            point, rest = {}, int(flat)
            for k, vals in reversed(axes):
                rest, i = divmod(rest, len(vals))
                point[k] = vals[i]
            out.append({k: point[k] for k in params})
        return out
    seen, out = set(), []
    for _ in range(count * 20):
        p = {k: _draw(v, rng) for k, v in params.items()}
        c = json.dumps(p, sort_keys=True)
        if c not in seen:
            seen.add(c)
            out.append(p)
        if len(out) == count:
            break
    return out


__all__ = ["Point", "resolve_point", "grid_points", "random_points", "format_override",
           "point_hash", "canonical_json", "split_params"]
