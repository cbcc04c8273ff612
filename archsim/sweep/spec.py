"""Sweep specification: a YAML file that declares a design space and what to optimise.

A spec names a base machine (preset or config file), fixed workload settings, the swept
parameters (machine config keys such as ``pim.multipliers_per_bank`` or workload keys ``model``,
``batch``, ``dataset``, ``seed``, ``system``, ``phase``), the search (``grid``, ``random`` or
``optuna``), the objectives and the constraints::

    name: neupims-small
    base: neupims                    # preset name or config file (relative to the spec)
    set: {pim.row_buffer_mode: dual} # fixed config overrides for every point (optional)
    workload: {model: gpt3-7b, batch: 256, dataset: sharegpt, seed: 0, system: neupims}
    parameters:
      pim.multipliers_per_bank: [8, 16, 32]        # a list of values
      npu.n_arrays: {low: 4, high: 16, step: 4}    # an integer range (4, 8, 12, 16)
      gpu.gemm_efficiency: {low: 0.5, high: 0.9, num: 5}   # a float range (grid needs num/step)
      batch: [64, 128, 256]                        # a workload key
    search: {kind: grid}             # or {kind: random, seed: 0, count: 50}
                                     # or {kind: optuna, seed: 0, count: 100, sampler: auto}
    objectives:
      - {metric: tokens_per_s, goal: maximize}
      - {metric: energy_per_token_uj, goal: minimize}
      - {metric: area_proxy_mm2, goal: minimize}
    constraints:
      - {metric: kv_capacity_fraction, max: 1.0}
      - "area_proxy_mm2 <= 2500"     # short form: METRIC <= VALUE or METRIC >= VALUE
    set: {area.dram_logic_factor.value: 10}   # area constants live in the machine config

:func:`load_spec` validates the whole file with pydantic plus checks that need the project
(config keys exist, the base loads, models/systems exist, metrics are known). Every error is a
:class:`~archsim.sweep.errors.SweepSpecError` whose message starts with ``FILE:LINE: dotted.key:``
(the line comes from the same YAML composition as :mod:`archsim.config` uses).
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any, Iterable, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, \
    model_validator

from archsim.config import MachineConfig, closest_keys, list_presets, load_config, valid_keys
from archsim.yamlfile import parse_yaml_mapping, read_text_file, yaml_key_lines
from archsim.errors import ConfigError
from archsim.results import METRICS
from archsim.serving import SYSTEM_PRESETS as _SERVING_SYSTEM_PRESETS
from archsim.energy.area import STATIC_METRICS
from archsim.sweep.errors import SweepSpecError

#: Keys of the ``workload`` section; each may also be swept under ``parameters``.
WORKLOAD_KEYS: tuple[str, ...] = ("model", "batch", "dataset", "seed", "system", "phase")

#: The systems of ``archsim run --system`` and the preset each starts from (DESIGN §3).
SYSTEM_PRESETS: dict[str, str] = _SERVING_SYSTEM_PRESETS

#: Per-iteration metrics an evaluation reports (keys of :data:`archsim.results.METRICS`).
RUN_METRICS: tuple[str, ...] = (
    "tokens_per_s", "tokens_per_s_per_device", "seconds_per_iteration", "cycles_per_iteration",
    "tokens", "npu_util", "flops_util", "pim_util", "mean_channel_bw_util",
    "energy_per_token_uj", "tokens_per_joule", "power_per_device_w", "layers_simulated",
    "layers_reused")

#: Metrics the sweep evaluator adds (KV-cache demand vs budget, parallelism, its wall time).
SWEEP_METRICS: dict[str, str] = {
    "kv_tokens": ("KV-cache tokens the batch holds: Σ seq_len over requests, each "
                  "at most the model's sliding window [tokens]"),
    "kv_capacity_tokens": "KV-cache tokens one device can hold after its weights "
                          "(archsim.serving.kv_budget) [tokens]",
    "kv_capacity_fraction": "kv_tokens ÷ kv_capacity_tokens; > 1 means the batch does not fit "
                            "[fraction]",
    "kv_bytes_per_device": "KV-cache bytes of the batch on one device [B]",
    "weight_bytes_per_device": "weight bytes one device holds [B]",
    "tensor_parallel": "tensor-parallel degree used [devices]",
    "pipeline_parallel": "pipeline-parallel degree used [devices]",
    "eval_wall_s": "wall time of the evaluation of the point on its worker [s]",
}

_GRID_LIMIT = 1_000_000
_CONSTRAINT_RE = re.compile(r"^\s*([A-Za-z_]\w*)\s*(<=|>=)\s*(\S+)\s*$")
_GOALS = {"maximize": "maximize", "maximise": "maximize", "max": "maximize",
          "minimize": "minimize", "minimise": "minimize", "min": "minimize"}


def known_metrics() -> list[str]:
    """Every metric name an objective or constraint may use with the default evaluator."""
    return list(RUN_METRICS) + list(STATIC_METRICS) + list(SWEEP_METRICS)


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


# ------------------------------------------------------------------------------------------
# Sections
# ------------------------------------------------------------------------------------------
class WorkloadSpec(_Strict):
    """What every point runs (each key may be swept under ``parameters``).

    Attributes:
        model: a built-in model name (``workloads.models.list_models()``) or a Hugging Face
            ``config.json`` path.
        batch: requests in the batch (>= 1).
        dataset: request-length source: ``sharegpt``, ``alpaca`` or a length/trace file.
        seed: seed of the request sampling (same seed = same batch on every point).
        system: ``gpu``, ``npu``, ``npu-pim`` or ``neupims`` (what ``archsim run --system``
            runs); also picks the base preset when the spec has no ``base``.
        phase: ``decode`` (one decode iteration of a warmed-up batch) or ``prefill``.
        check_capacity: a point whose batch does not fit one device's memory after the weights
            is not simulated and is infeasible (``archsim run`` refuses such a batch too; the
            constraint ``kv_capacity_fraction <= 1`` is implied). ``false`` simulates it anyway.
        keep_channels: the compiler keeps the request file's KV channels (``dataset``: a
            ``.csv`` snapshot's ``ch_idx``, or the channels a ``.tsv``/``.json`` warm-up gives
            at admission) instead of the machine's ``system.channel_policy``
            (``archsim run --keep-channels``). Needs a request file and no ``gpu`` system
            (checked by :func:`load_spec`); not sweepable.
    """

    model: str = "gpt3-7b"
    batch: int = Field(256, ge=1, le=1 << 20)
    dataset: str = "sharegpt"
    seed: int = Field(0, ge=0)
    system: str = "neupims"
    phase: Literal["decode", "prefill"] = "decode"
    check_capacity: bool = True
    keep_channels: bool = False

    @field_validator("model")
    @classmethod
    def _model_exists(cls, v: str) -> str:
        from workloads.errors import WorkloadError
        from workloads.models import get_model, list_models

        if v.endswith(".json"):
            return v
        try:
            get_model(v)
        except WorkloadError:
            raise ValueError(f"unknown model {v!r}; valid: {', '.join(list_models())} "
                             "or a Hugging Face config.json path") from None
        return v

    @field_validator("system")
    @classmethod
    def _system_exists(cls, v: str) -> str:
        if v not in SYSTEM_PRESETS:
            raise ValueError(f"unknown system {v!r}; valid: {', '.join(SYSTEM_PRESETS)}")
        return v

    @field_validator("dataset")
    @classmethod
    def _dataset_exists(cls, v: str) -> str:
        from workloads.requests import BUILTIN_DATASETS

        if v in BUILTIN_DATASETS or Path(v).is_file():
            return v
        raise ValueError(f"unknown dataset {v!r}; valid: {', '.join(BUILTIN_DATASETS)}, or a "
                         "request file (.csv decode snapshot, .tsv length table, .json "
                         "ShareGPT) that exists")


class RangeSpec(_Strict):
    """A numeric range parameter: ``{low, high[, step][, num][, log]}``.

    Integer when ``low``, ``high`` (and ``step``) are integers. A grid expands it with ``step``
    (integers default to step 1) or into ``num`` evenly spaced values (geometrically spaced with
    ``log: true``); random search draws uniformly (log-uniformly with ``log``); optuna uses
    ``suggest_int`` / ``suggest_float`` with the same bounds.
    """

    low: int | float
    high: int | float
    step: int | float | None = Field(None, gt=0)
    num: int | None = Field(None, ge=2, le=100000)
    log: bool = False

    @property
    def is_int(self) -> bool:
        """True when ``low``, ``high`` and ``step`` were written as integers (and not log)."""
        return (not self.log and all(isinstance(v, int) and not isinstance(v, bool)
                                     for v in (self.low, self.high, self.step or 1)))

    @model_validator(mode="after")
    def _bounds(self) -> "RangeSpec":
        if not self.high > self.low:
            raise ValueError(f"high ({self.high:g}) must be > low ({self.low:g})")
        if self.log and self.low <= 0:
            raise ValueError(f"log ranges need low > 0, got {self.low:g}")
        if self.step is not None and self.num is not None:
            raise ValueError("give step or num, not both")
        if self.log and self.step is not None:
            raise ValueError("log ranges take num, not step")
        return self


class SearchSpec(_Strict):
    """How points are chosen.

    Attributes:
        kind: ``grid`` (every combination, in spec order), ``random`` (``count`` points drawn
            with ``seed``; without replacement when every parameter is a list), or ``optuna``
            (``count`` trials of a TPE sampler for one objective, NSGA-II for several).
        seed: seed of the random draws / optuna sampler.
        count: number of points (random) or trials (optuna); not allowed for grid.
        sampler: optuna sampler: ``auto`` (TPE for one objective, NSGA-II for several), ``tpe``,
            ``nsga2``.
        batch_size: optuna trials asked per round; a round is told only when all of its points
            finished, so results do not depend on the executor's timing (default 4).
    """

    kind: Literal["grid", "random", "optuna"] = "grid"
    seed: int = Field(0, ge=0)
    count: int | None = Field(None, ge=1, le=10_000_000)
    sampler: Literal["auto", "tpe", "nsga2"] = "auto"
    batch_size: int = Field(4, ge=1, le=10000)

    @model_validator(mode="after")
    def _count(self) -> "SearchSpec":
        if self.kind == "grid" and self.count is not None:
            raise ValueError("count applies to random and optuna searches; a grid runs every "
                             "combination")
        if self.kind in ("random", "optuna") and self.count is None:
            raise ValueError(f"a {self.kind} search needs count (number of points)")
        if self.kind != "optuna" and self.sampler != "auto":
            raise ValueError("sampler applies to optuna searches only")
        return self


class ObjectiveSpec(_Strict):
    """One objective: ``{metric: tokens_per_s, goal: maximize}`` (goal also ``max``/``min``,
    ``maximise``/``minimise``)."""

    metric: str
    goal: Literal["maximize", "minimize"]

    @field_validator("goal", mode="before")
    @classmethod
    def _goal(cls, v: Any) -> Any:
        if isinstance(v, str) and v.lower() in _GOALS:
            return _GOALS[v.lower()]
        raise ValueError(f"goal must be maximize or minimize (or max/min), got {v!r}")

    @property
    def sign(self) -> float:
        """+1 for maximise, -1 for minimise (multiply a value to get 'larger is better')."""
        return 1.0 if self.goal == "maximize" else -1.0


class ConstraintSpec(_Strict):
    """A bound on a metric: ``{metric: area_proxy_mm2, max: 2500}`` (and/or ``min``), or the
    short form ``"area_proxy_mm2 <= 2500"``. A point outside a bound is *infeasible*: it stays
    in the database but not in the best points or the Pareto front. Bounds on metrics known
    before simulation (the area proxy, memory capacity) are checked first and the point is not
    run at all."""

    metric: str
    max: float | None = None
    min: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data: Any) -> Any:
        if isinstance(data, str):
            m = _CONSTRAINT_RE.match(data)
            if not m:
                raise ValueError(f"constraint {data!r}: expected 'METRIC <= VALUE', "
                                 "'METRIC >= VALUE' or {metric: M, max: V, min: V}")
            try:
                value = float(m.group(3))
            except ValueError:
                raise ValueError(f"constraint {data!r}: {m.group(3)!r} is not a number") from None
            return {"metric": m.group(1), ("max" if m.group(2) == "<=" else "min"): value}
        return data

    @model_validator(mode="after")
    def _some_bound(self) -> "ConstraintSpec":
        if self.max is None and self.min is None:
            raise ValueError(f"constraint on {self.metric}: give max and/or min")
        if self.max is not None and self.min is not None and self.min > self.max:
            raise ValueError(f"constraint on {self.metric}: min {self.min:g} > max {self.max:g}")
        return self

    def violation(self, value: Any) -> float | None:
        """How far ``value`` is outside the bounds (0 inside; optuna's convention: > 0 means
        violated). ``None`` when the value is missing or not a number."""
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) \
                or math.isnan(value):
            return None
        v = 0.0
        if self.max is not None and value > self.max:
            v = max(v, float(value) - self.max)
        if self.min is not None and value < self.min:
            v = max(v, self.min - float(value))
        return v

    def describe(self) -> str:
        """``'min <= metric <= max'`` text for messages."""
        lo = f"{self.min:g} <= " if self.min is not None else ""
        hi = f" <= {self.max:g}" if self.max is not None else ""
        return f"{lo}{self.metric}{hi}"


Scalar = bool | int | float | str | None


class SweepSpec(_Strict):
    """A validated sweep spec (see the module docstring). Frozen.

    Attributes:
        name: a label for tables and plots.
        description: free text.
        base: preset name or config file of the machine (a relative path is relative to the
            spec file); default: the preset of ``workload.system`` (:data:`SYSTEM_PRESETS`).
        set_: (YAML key ``set``) fixed config overrides ``{dotted.key: value}`` for every point.
        workload: :class:`WorkloadSpec`.
        parameters: ``{key: [values] | {low, high, ...}}`` in YAML order.
        search: :class:`SearchSpec`.
        objectives: one or more :class:`ObjectiveSpec`.
        constraints: :class:`ConstraintSpec` list.
        evaluator: ``module:function`` that evaluates one point (default
            ``archsim.sweep.evaluate:evaluate_point``); a plug-in point for other simulators.
        source: the spec file (set by :func:`load_spec`, not read from YAML).
    """

    name: str = "sweep"
    description: str = ""
    base: str | None = None
    set_: dict[str, Scalar | list[Scalar]] = Field(default_factory=dict, alias="set")
    workload: WorkloadSpec = WorkloadSpec()
    parameters: dict[str, list[Scalar] | RangeSpec] = Field(default_factory=dict)
    search: SearchSpec = SearchSpec()
    objectives: list[ObjectiveSpec] = Field(min_length=1)
    constraints: list[ConstraintSpec] = Field(default_factory=list)
    evaluator: str = "archsim.sweep.evaluate:evaluate_point"
    source: str = Field("", exclude=True)

    @field_validator("parameters", mode="before")
    @classmethod
    def _param_shapes(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        out = {}
        for k, val in v.items():
            if isinstance(val, dict) and ("low" in val or "high" in val):
                out[k] = val
            elif isinstance(val, list):
                if not val:
                    raise ValueError(f"parameter {k}: the list of values is empty")
                out[k] = val
            else:
                raise ValueError(f"parameter {k}: give a list of values or a range "
                                 f"{{low, high[, step | num][, log]}}, got {val!r}")
        return out

    @property
    def directions(self) -> list[str]:
        """``maximize``/``minimize`` per objective, in order."""
        return [o.goal for o in self.objectives]

    @property
    def metric_names(self) -> list[str]:
        """Objective metric names, in order."""
        return [o.metric for o in self.objectives]

    def base_for(self, system: str) -> str:
        """The base config of a point whose workload runs ``system``: ``base`` if the spec
        has one, else the system's preset."""
        return self.base or SYSTEM_PRESETS[system]

    def fingerprint(self) -> str:
        """sha256 of the spec's content (everything but ``source``), for the results DB."""
        blob = json.dumps(self.model_dump(mode="json", by_alias=True), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()


# ------------------------------------------------------------------------------------------
# Loading with file:line errors
# ------------------------------------------------------------------------------------------
def _node_lines(text: str) -> dict[tuple[str, ...], int]:
    """Line (1-based) of every mapping key (via :func:`archsim.config.yaml_key_lines`) and of
    every sequence item (path element = the index as a string)."""
    lines = yaml_key_lines(text)
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return lines

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                walk(v, path + (str(k.value),))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                lines.setdefault(path + (str(i),), item.start_mark.line + 1)
                walk(item, path + (str(i),))

    walk(root, ())
    return lines


class _Located:
    """Turns (dotted location, message) into ``FILE:LINE: key: message``."""

    def __init__(self, source: str, lines: dict[tuple[str, ...], int]) -> None:
        self.source, self.lines = source, lines

    def line(self, loc: Iterable[Any]) -> int | None:
        path = tuple(str(p) for p in loc)
        for n in range(len(path), 0, -1):
            if path[:n] in self.lines:
                return self.lines[path[:n]]
        return None

    def msg(self, loc: Iterable[Any], text: str) -> str:
        loc = tuple(loc)
        line = self.line(loc)
        where = f"{self.source}:{line}" if line else self.source
        key = ".".join(str(p) for p in loc)
        return f"{where}: {key}: {text}" if key else f"{where}: {text}"

    def error(self, loc: Iterable[Any], text: str) -> SweepSpecError:
        return SweepSpecError(self.msg(loc, text))


def _clean_loc(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """Drop pydantic's union/function tags (``'list[...]'``, ``'RangeSpec'``, ...) from a loc."""
    tags = ("list[", "RangeSpec", "function-", "str", "int", "float", "bool", "none",
            "dict[", "tagged-union")
    return tuple(p for p in loc if not (isinstance(p, str) and p.startswith(tags)
                                        and p not in WORKLOAD_KEYS))


def _format_pydantic(exc: ValidationError, loc_of: _Located, prefix: tuple[Any, ...] = ()) -> str:
    msgs: list[str] = []
    seen: set[tuple[Any, ...]] = set()
    errors = exc.errors()
    specific = [prefix + _clean_loc(tuple(e["loc"])) for e in errors
                if not e["type"].endswith("_type")]
    for err in errors:
        loc = prefix + _clean_loc(tuple(err["loc"]))
        if err["type"].endswith("_type") and any(s[:len(loc)] == loc for s in specific):
            continue  # a union member whose type did not match; the other one says more
        if loc in seen:
            continue  # one message per key (a union reports once per member)
        seen.add(loc)
        kind = err["type"]
        if kind == "extra_forbidden":
            parent = loc[:-1]
            text = f"unknown key '{loc[-1]}'"
            valid = _section_keys(parent)
            if valid:
                text += f"; valid keys here: {', '.join(valid)}"
            msgs.append(loc_of.msg(loc, text))
        elif kind in ("value_error", "assertion_error"):
            msgs.append(loc_of.msg(loc, err["msg"].removeprefix("Value error, ")))
        elif kind == "missing":
            msgs.append(loc_of.msg(loc, "required key is missing"))
        else:
            got = err.get("input")
            got_s = "" if isinstance(got, (dict, list)) else f" (got {got!r})"
            msgs.append(loc_of.msg(loc, f"{err['msg']}{got_s}"))
    return "; ".join(msgs)


def _section_keys(loc: tuple[Any, ...]) -> list[str]:
    """Valid keys of the spec section at ``loc`` (for unknown-key messages)."""
    model: Any = SweepSpec
    for p in loc:
        if isinstance(p, int) or (isinstance(p, str) and p.isdigit()):
            continue
        field = model.model_fields.get(p) if hasattr(model, "model_fields") else None
        if field is None:
            field = next((f for f in getattr(model, "model_fields", {}).values()
                          if f.alias == p), None)
        if field is None:
            return []
        ann = field.annotation
        args = getattr(ann, "__args__", ())
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else next(
            (a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if model is None:
            return []
    return [f.alias or n for n, f in model.model_fields.items() if n != "source"]


def _config_key_ok(key: str) -> bool:
    """True when ``key`` is a settable leaf of the machine config (as for ``--set``)."""
    valid = valid_keys(MachineConfig)
    sections = {k for k in valid if any(v.startswith(k + ".") for v in valid)}
    if key in valid:
        return key not in sections or key.endswith("latency_cycles")
    return any(key.startswith(v + ".") for v in valid if v.endswith("latency_cycles"))


def load_spec(path: str | Path, text: str | None = None) -> SweepSpec:
    """Read and validate a sweep spec.

    Args:
        path: the YAML file (``text`` is read from it when not given); relative ``base`` paths
            are resolved against its directory.
        text: the YAML text, when it is already in memory (``path`` then only names it).

    Returns:
        The frozen :class:`SweepSpec` with ``source`` set to ``path`` and ``base`` resolved to a
        preset name or an absolute file path.

    Raises:
        SweepSpecError: unreadable file, bad YAML, unknown or misspelt key (with valid keys),
            wrong type or range, a parameter that is neither a config key nor a workload key,
            a base that does not load, an unknown model/system/metric, an invalid value of a
            swept workload key. The message names the file, line and dotted key.
    """
    p = Path(path)
    source = str(path)
    if text is None:
        text = read_text_file(p, "sweep spec (YAML)", SweepSpecError)
    data = parse_yaml_mapping(text, source, SweepSpecError,
                              "keys base, workload, parameters, search, objectives, constraints")
    loc_of = _Located(source, _node_lines(text))
    if "source" in data:
        raise loc_of.error(("source",), "unknown key 'source'")
    if "area" in data:
        raise loc_of.error(("area",), "the area constants are in the machine config's 'area' "
                           "section now, each with its source (docs/energy.md): set one for "
                           "every point with set: {area.dram_logic_factor.value: 20} or sweep "
                           "it under parameters")
    _resolve_dataset_paths(data, p.parent)
    params = data.get("parameters")
    if isinstance(params, dict):  # shape errors at the parameter's own line
        for k, val in params.items():
            if isinstance(val, list) and not val:
                raise loc_of.error(("parameters", k), "the list of values is empty")
            if not isinstance(val, (list, dict)):
                raise loc_of.error(("parameters", k), "give a list of values or a range "
                                   f"{{low, high[, step | num][, log]}}, got {val!r}")
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise SweepSpecError(_format_pydantic(exc, loc_of)) from None

    # -- the base machine loads
    base = spec.base
    if base is not None and base not in list_presets():
        bp = Path(base)
        if not bp.is_absolute():
            bp = (p.parent / bp).resolve()
        base = str(bp)
    for system in _swept_values(spec, "system"):
        b = base or SYSTEM_PRESETS[system]
        try:
            load_config(b)
        except ConfigError as exc:
            raise loc_of.error(("base",) if spec.base else ("workload", "system"),
                               f"the base configuration does not load: {exc}") from None

    _check_channels(spec, base, loc_of)

    # -- fixed overrides and parameters name real keys
    valid = valid_keys(MachineConfig)
    for key in spec.set_:
        if not _config_key_ok(key):
            raise loc_of.error(("set", key), f"unknown config key{closest_keys(key, valid)}")
    for key, val in spec.parameters.items():
        loc = ("parameters", key)
        if key in spec.set_:
            raise loc_of.error(loc, "is both fixed under 'set' and swept under 'parameters'")
        if key in WORKLOAD_KEYS:
            values = val if isinstance(val, list) else None
            if isinstance(val, RangeSpec) and key not in ("batch", "seed"):
                raise loc_of.error(loc, f"workload key '{key}' takes a list of values")
            for i, v in enumerate(values or []):
                try:
                    WorkloadSpec.model_validate({**spec.workload.model_dump(), key: v})
                except ValidationError as exc:
                    raise SweepSpecError(_format_pydantic(exc, loc_of, loc + (i,))
                                         .replace(f".{i}.{key}:", f".{i}:")) from None
        elif not _config_key_ok(key):
            raise loc_of.error(loc, "neither a workload key (" + ", ".join(WORKLOAD_KEYS) +
                               ") nor a machine config key" + closest_keys(key, valid))
        if isinstance(val, RangeSpec) and spec.search.kind == "grid" and val.step is None \
                and val.num is None and not val.is_int:
            raise loc_of.error(loc, "a float range in a grid needs step or num")
    for section, keys in (("set", spec.set_), ("parameters", spec.parameters)):
        for key in keys:
            if key.startswith("serving."):
                raise loc_of.error((section, key), "the serving.* keys (the KV-cache manager "
                                   "of archsim run --serve) change nothing in a sweep point, "
                                   "which is one decode or prefill iteration")
    size = grid_size(spec)
    if spec.search.kind == "grid" and size > _GRID_LIMIT:
        raise loc_of.error(("parameters",), f"the grid has {size:,} points (> {_GRID_LIMIT:,});"
                           " use search kind random or optuna")

    # -- metrics are known (custom evaluators may report anything)
    if spec.evaluator == SweepSpec.model_fields["evaluator"].default:
        known = known_metrics()
        for section, items in (("objectives", spec.objectives),
                               ("constraints", spec.constraints)):
            for i, item in enumerate(items):
                if item.metric not in known:
                    near = [m for m in known if m.split("_")[0] == item.metric.split("_")[0]]
                    import difflib

                    near = difflib.get_close_matches(item.metric, known, n=3, cutoff=0.5) or near
                    hint = f"; did you mean: {', '.join(near[:3])}" if near else \
                        f"; known metrics: {', '.join(known)}"
                    raise loc_of.error((section, i, "metric"),
                                       f"unknown metric '{item.metric}'{hint}")
    elif ":" not in spec.evaluator:
        raise loc_of.error(("evaluator",), "expected 'module:function'")
    metrics = spec.metric_names
    dup = {m for m in metrics if metrics.count(m) > 1}
    if dup:
        raise loc_of.error(("objectives",), f"metric listed twice: {', '.join(sorted(dup))}")
    constraints = list(spec.constraints)
    default_eval = spec.evaluator == SweepSpec.model_fields["evaluator"].default
    if default_eval and spec.workload.check_capacity and not any(
            c.metric == "kv_capacity_fraction" for c in constraints):
        constraints.append(ConstraintSpec(metric="kv_capacity_fraction", max=1.0))
    return spec.model_copy(update={"base": base, "source": source,
                                   "constraints": constraints})


def _check_channels(spec: SweepSpec, base: str | None, loc_of: "_Located") -> None:
    """``workload.keep_channels`` needs request files and NPU systems; every ``.csv``
    snapshot's ``ch_idx`` must be a channel of every machine of the sweep (the base of each
    swept system with the fixed ``set`` overrides, and every swept ``memory.org.channels``).

    Raises:
        SweepSpecError: naming the spec file, line and key, and the snapshot's file and line.
    """
    from archsim.errors import ArchsimError
    from archsim.sweep.space import format_override
    from mapping.channels import check_batch_channels
    from workloads.errors import WorkloadError
    from workloads.requests import BUILTIN_DATASETS, load_decode_snapshot

    datasets = _swept_values(spec, "dataset")
    systems = _swept_values(spec, "system")
    if spec.workload.keep_channels:
        loc = ("workload", "keep_channels")
        builtin = [d for d in datasets if d in BUILTIN_DATASETS]
        if builtin:
            raise loc_of.error(loc, f"keeps the channels of a request file, but dataset "
                               f"{builtin[0]!r} is a built-in distribution; give a .csv snapshot "
                               "(seq_len,ch_idx) or a length table as workload.dataset")
        if "gpu" in systems:
            raise loc_of.error(loc, "the gpu system has no KV channels to keep; sweep the NPU "
                               "systems (npu, npu-pim, neupims) only")
    csvs = [d for d in datasets if str(d).lower().endswith(".csv") and Path(d).is_file()]
    if not csvs:
        return
    swept = spec.parameters.get("memory.org.channels")
    counts = set()
    for system in systems:
        if system == "gpu":
            continue
        try:
            cfg = load_config(base or SYSTEM_PRESETS[system],
                              [format_override(k, v) for k, v in spec.set_.items()])
        except (ConfigError, SweepSpecError):
            continue                      # reported with its key by the checks below
        counts.add(cfg.memory.org.channels)
    if isinstance(swept, list):
        counts.update(int(v) for v in swept if isinstance(v, int))
    elif isinstance(swept, RangeSpec):
        counts.add(int(swept.low))
    for d in csvs:
        try:
            batch = load_decode_snapshot(d)
            for c in sorted(counts):
                check_batch_channels(batch, c)
        except (ArchsimError, WorkloadError) as exc:
            where = ("parameters", "dataset") if "dataset" in spec.parameters else (
                "workload", "dataset")
            raise loc_of.error(where, str(exc)) from None


def _resolve_dataset_paths(data: dict[str, Any], spec_dir: Path) -> None:
    """Make relative request-file paths (``workload.dataset`` and swept ``dataset`` values)
    absolute, relative to the spec's directory, so that workers find them."""
    def fix(v: Any) -> Any:
        if isinstance(v, str) and v not in ("sharegpt", "alpaca") and not Path(v).is_absolute() \
                and (spec_dir / v).is_file():
            return str((spec_dir / v).resolve())
        return v

    wl = data.get("workload")
    if isinstance(wl, dict) and "dataset" in wl:
        wl["dataset"] = fix(wl["dataset"])
    params = data.get("parameters")
    if isinstance(params, dict) and isinstance(params.get("dataset"), list):
        params["dataset"] = [fix(v) for v in params["dataset"]]


def _swept_values(spec: SweepSpec, key: str) -> list[Any]:
    """The values a workload key takes over the sweep (its list, or the fixed value)."""
    val = spec.parameters.get(key)
    if isinstance(val, list):
        return list(val)
    return [getattr(spec.workload, key)]


def grid_size(spec: SweepSpec) -> int:
    """Number of points of the full grid of ``spec`` (continuous ranges without step/num count
    as their integer span, or 1 if float — only meaningful for grid specs)."""
    n = 1
    for val in spec.parameters.values():
        n *= len(val) if isinstance(val, list) else len(range_values(val))
    return n


def range_values(r: RangeSpec) -> list[int | float]:
    """The grid values of a range: ``step`` apart from ``low`` up to ``high`` inclusive, or
    ``num`` values evenly (``log``: geometrically) spaced; integers stay integers."""
    if r.num is not None:
        if r.log:
            vals = [r.low * (r.high / r.low) ** (i / (r.num - 1)) for i in range(r.num)]
        else:
            vals = [r.low + (r.high - r.low) * i / (r.num - 1) for i in range(r.num)]
        if r.is_int:
            out = sorted({int(round(v)) for v in vals})
            return out
        return [float(v) for v in vals]
    if r.is_int:
        step = int(r.step or 1)
        n = int((r.high - r.low) // step) + 1
        if n > _GRID_LIMIT:
            return list(range(_GRID_LIMIT + 1))
        return [int(r.low) + i * step for i in range(n)]
    if r.step is None:
        return [r.low]  # not a grid range; load_spec rejects it for grids
    n = int(math.floor((r.high - r.low) / r.step + 1e-9)) + 1
    return [round(r.low + i * r.step, 12) for i in range(min(n, _GRID_LIMIT + 1))]


__all__ = ["SweepSpec", "WorkloadSpec", "RangeSpec", "SearchSpec", "ObjectiveSpec",
           "ConstraintSpec", "load_spec", "grid_size", "range_values", "known_metrics",
           "WORKLOAD_KEYS", "SYSTEM_PRESETS", "RUN_METRICS", "SWEEP_METRICS"]
