"""Loading a machine: presets, YAML files with ``base:`` inheritance, ``--set`` overrides, and
the one-line error messages (file, line, dotted key, allowed values, closest valid keys).

Each config file is parsed once per process (cached by path, modification time and size).
"""
from __future__ import annotations

import copy
import difflib
import functools
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from archsim.config.base import CrossFieldError
from archsim.config.machine import GPU_MODE_KEYS, MachineConfig
from archsim.errors import ConfigError
from archsim.yamlfile import parse_yaml_mapping, read_text_file, yaml_key_lines

#: The presets shipped with the package (``archsim/presets/*.yaml``).
PRESET_DIR = Path(__file__).resolve().parents[1] / "presets"


def list_presets() -> list[str]:
    """Names of the presets shipped in ``archsim/presets`` (file stems)."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


#: Parsed config files of this process: (resolved path, mtime_ns, size) -> (data, key lines).
#: A sweep resolves thousands of points against the same preset: it is parsed once.
_YAML_CACHE: dict[tuple[str, int, int], tuple[dict[str, Any], dict[tuple[str, ...], int]]] = {}


def _read_yaml(path: Path) -> tuple[dict[str, Any], dict[tuple[str, ...], int]]:
    """Read one YAML config file into a dict (and its key→line map); ConfigError on failure.

    The parse is cached per process by the file's resolved path, modification time and size
    (a changed file is parsed again); callers get their own deep copy of the data.
    """
    try:
        st = path.stat()
        key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        key = None
    hit = _YAML_CACHE.get(key) if key else None
    if hit is None:
        text = read_text_file(path, "YAML config file", ConfigError)
        hit = (parse_yaml_mapping(text, str(path), ConfigError,
                                  "sections (npu, memory, pim, system, gpu)"),
               yaml_key_lines(text))
        if key:
            _YAML_CACHE[key] = hit
    return copy.deepcopy(hit[0]), hit[1]


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """Recursively merge ``top`` over ``base`` (mappings merge, everything else replaces)."""
    out = dict(base)
    for k, v in top.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def valid_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every dotted key path that ``model`` accepts (for 'did you mean' suggestions)."""
    keys: list[str] = []
    for name, field in model.model_fields.items():
        dotted = f"{prefix}{name}"
        keys.append(dotted)
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            keys.extend(valid_keys(ann, dotted + "."))
    return keys


@functools.lru_cache(maxsize=1)
def _machine_keys() -> tuple[str, ...]:
    """:func:`valid_keys` of :class:`MachineConfig` (computed once per process)."""
    return tuple(valid_keys(MachineConfig))


#: Keys that existed and were removed because no model reads them: ``{dotted key: what the
#: model does instead}``. A file or ``--set`` still giving one is rejected with that reason
#: rather than as an unknown key (``tests/test_config_keywalk.py`` walks every other key).
REMOVED_KEYS: dict[str, str] = {
    "npu.scratchpad.bytes_per_cycle_per_bank":
        "the timing model has no scratchpad port bandwidth: the arrays, vector units and DMA "
        "never wait for SRAM ports",
    "pim.global_buffer_bytes":
        "the PIM global buffer holds one row's worth of vector, memory.org.page_size_bytes "
        "(what one GWRITE loads)",
}


def _removed_key_error(dotted: str, where: str) -> ConfigError:
    return ConfigError(f"{where}: {dotted} is not modelled ({REMOVED_KEYS[dotted]}); "
                       "remove it")


def _check_removed_keys(data: dict[str, Any], source: str,
                        lines: dict[tuple[str, ...], int]) -> None:
    """Reject a key of :data:`REMOVED_KEYS` given in a config file (or its ``base``)."""
    for dotted in REMOVED_KEYS:
        cur: Any = data
        path = tuple(dotted.split("."))
        for p in path:
            if not isinstance(cur, dict) or p not in cur:
                break
            cur = cur[p]
        else:
            line = lines.get(path)
            raise _removed_key_error(dotted, f"{source}:{line}" if line else source)


def closest_keys(key: str, candidates: list[str]) -> str:
    """'; did you mean: a, b' for the keys nearest ``key`` (empty when none is near).

    Falls back to '; valid keys here: …' (the siblings of ``key``) when nothing is close.
    """
    leaf = key.rsplit(".", 1)[-1]
    parent = key.rsplit(".", 1)[0] + "." if "." in key else ""
    siblings = [c for c in candidates if c.startswith(parent) and "." not in c[len(parent):]]
    near = difflib.get_close_matches(key, candidates, n=3, cutoff=0.6)
    near += [c for c in difflib.get_close_matches(parent + leaf, siblings, n=3, cutoff=0.5)
             if c not in near]
    if not near:
        near = [c for c in candidates if c.rsplit(".", 1)[-1].lower() == leaf.lower()]
    return f"; did you mean: {', '.join(near[:3])}" if near else (
        f"; valid keys here: {', '.join(s.rsplit('.', 1)[-1] for s in siblings)}"
        if siblings else "")


def _format_validation_error(exc: ValidationError, source: str,
                             lines: dict[tuple[str, ...], int],
                             overrides: dict[tuple[str, ...], str]) -> str:
    """One message per pydantic error: where (file:line or the --set), dotted key, what is
    allowed. ``overrides`` maps overridden key paths to the ``--set`` text that set them."""
    valid = list(_machine_keys())
    msgs = []
    for err in exc.errors():
        loc = tuple(str(p) for p in err["loc"])
        if loc and loc[-1] == "[key]":          # a bad key of a dict-valued setting
            loc = loc[:-1]
        cross = (err.get("ctx") or {}).get("error")
        related = [loc]
        if isinstance(cross, CrossFieldError):  # name the key, find its line or --set
            related = [loc + (k,) for k in cross.keys]
            loc = related[0]
        key = ".".join(loc) or "(top level)"
        hits = [t for path, t in overrides.items()
                if any(path[:len(r)] == r for r in related)]
        if hits:
            where = f"{source} with --set {' '.join(hits)}"
        else:
            line = lines.get(loc)
            where = f"{source}" + (f":{line}" if line else "")
        kind = err["type"]
        if kind == "extra_forbidden":
            msgs.append(f"{where}: unknown key '{key}'{closest_keys(key, valid)}")
        elif kind in ("value_error", "assertion_error"):
            text = err["msg"].removeprefix("Value error, ")
            msgs.append(f"{where}: {key or 'config'}: {text}")
        else:
            got = err.get("input")
            got_s = "" if isinstance(got, dict) else f" (got {got!r})"
            msgs.append(f"{where}: {key}: {err['msg']}{got_s}")
    return "; ".join(msgs)


def parse_override(text: str) -> tuple[tuple[str, ...], Any]:
    """Parse one ``--set dotted.key=value`` override; the value is read as YAML.

    Returns the key path and the parsed value. Raises ConfigError when there is no ``=`` or the
    key is empty.
    """
    if "=" not in text:
        raise ConfigError(f"override '{text}': expected KEY=VALUE, e.g. "
                          "memory.timing.tRCDRD=16")
    key, _, raw = text.partition("=")
    key = key.strip()
    if not key or not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*", key):
        raise ConfigError(f"override '{text}': '{key}' is not a dotted key like "
                          "pim.multipliers_per_bank")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return tuple(key.split(".")), value


def _apply_override(data: dict[str, Any], path: tuple[str, ...], value: Any,
                    text: str) -> dict[str, Any]:
    """Set ``path`` to ``value`` in a nested dict, checking the key exists in the schema."""
    valid = list(_machine_keys())
    dotted = ".".join(path)
    if dotted in REMOVED_KEYS:
        raise _removed_key_error(dotted, f"override '{text}'")
    if dotted not in valid and not any(dotted.startswith(v + ".") for v in valid
                                       if v.endswith(("latency_cycles", "passes", "ops"))):
        raise ConfigError(f"override '{text}': unknown key '{dotted}'{closest_keys(dotted, valid)}")
    out = dict(data)
    cur = out
    for p in path[:-1]:
        nxt = cur.get(p)
        nxt = dict(nxt) if isinstance(nxt, dict) else {}
        cur[p] = nxt
        cur = nxt
    cur[path[-1]] = value
    return out


def _load_raw(name_or_path: str | Path, seen: tuple[str, ...] = ()) -> tuple[
        dict[str, Any], str, dict[tuple[str, ...], int]]:
    """Resolve a preset name or file path (following ``base:``) into merged raw data."""
    s = str(name_or_path)
    path = Path(s)
    if s in list_presets():
        path = PRESET_DIR / f"{s}.yaml"
        source = f"preset '{s}' ({path.name})"
    elif path.suffix in (".yaml", ".yml") or path.exists():
        if not path.exists():
            raise ConfigError(f"{path}: config file not found")
        source = str(path)
    else:
        raise ConfigError(f"unknown config '{s}': not a preset and not a file; "
                          f"presets: {', '.join(list_presets())}")
    if s in seen:
        raise ConfigError(f"{source}: 'base' inheritance loops through {' -> '.join(seen)}")
    data, lines = _read_yaml(path)
    own_name = data.get("name", path.stem)
    base = data.pop("base", None)
    if base is not None:
        if not isinstance(base, str):
            raise ConfigError(f"{source}: base: must be a preset name or file path")
        base_path = base
        if base not in list_presets() and not Path(base).is_absolute():
            base_path = str(path.parent / base)
        base_data, _, _ = _load_raw(base_path if Path(base_path).exists() else base, seen + (s,))
        data = _deep_merge(base_data, data)
    data["name"] = own_name
    return data, source, lines


def load_config(name_or_path: str | Path = "neupims",
                overrides: list[str] | tuple[str, ...] = ()) -> MachineConfig:
    """Load a preset (by name) or a YAML file, apply ``--set`` overrides, validate.

    Args:
        name_or_path: a preset name from :func:`list_presets` or a path to a YAML file
            (which may itself say ``base: <preset or file>``).
        overrides: ``dotted.key=value`` strings applied in order after the file.

    Returns:
        The frozen :class:`MachineConfig`.

    Raises:
        ConfigError: unknown preset/file, bad YAML, unknown key (with the closest valid keys),
            wrong type or out-of-range value (with the allowed range), or an inconsistent
            combination (with the reason). The message names the file and line when known.
    """
    data, source, lines = _load_raw(name_or_path)
    _check_removed_keys(data, source, lines)
    overridden: dict[tuple[str, ...], str] = {}
    for text in overrides:
        path, value = parse_override(text)
        data = _apply_override(data, path, value, text)
        overridden[path] = text
    try:
        cfg = MachineConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(exc, source, lines, overridden)) from None
    _check_gpu_mode_overrides(cfg, overridden, source)
    return cfg


def _check_gpu_mode_overrides(cfg: MachineConfig, overridden: dict[tuple[str, ...], str],
                              source: str) -> None:
    """Reject an override of a ``gpu`` key that the configured ``gpu.mode`` does not read
    (it would silently do nothing)."""
    mode = cfg.gpu.mode
    for path, text in overridden.items():
        if len(path) < 2 or path[0] != "gpu":
            continue
        for other, keys in GPU_MODE_KEYS.items():
            if other != mode and path[1] in keys:
                raise ConfigError(
                    f"{source} with --set {text}: gpu.{path[1]} is read only with gpu.mode: "
                    f"{other}, but gpu.mode is {mode} (keys of {mode} mode: "
                    f"{', '.join('gpu.' + k for k in GPU_MODE_KEYS[mode])}; or set "
                    f"gpu.mode={other})")


def config_to_yaml(cfg: MachineConfig) -> str:
    """The effective configuration as YAML text (every key, defaults included)."""
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)


__all__ = ["PRESET_DIR", "list_presets", "valid_keys", "REMOVED_KEYS", "closest_keys",
           "parse_override", "load_config", "config_to_yaml"]
