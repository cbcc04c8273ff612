"""Machine configuration: typed, validated, immutable.

A machine is described by one YAML document with eight sections — ``npu``, ``memory``, ``pim``,
``system``, ``serving`` (the serving runtime's KV-cache manager), ``gpu``, ``energy`` and
``area`` — validated by pydantic v2 into frozen objects
(:class:`MachineConfig`). ``energy`` and ``area`` (the per-action energy table and the per-unit
areas, :mod:`archsim.energy.schema`) have no defaults: every constant comes from the preset with
its ``source``.
Presets ship in ``archsim/presets/`` and may inherit (``base: neupims``); any key can be
overridden with ``--set dotted.key=value`` (the value is parsed as YAML).

Modules (every public name is re-exported here: ``from archsim.config import load_config``):

* :mod:`archsim.config.base` — the frozen section base and :class:`CrossFieldError`;
* :mod:`archsim.config.memory` — HBM organisation, timing (and its cross-field rules
  :data:`TIMING_RULES`), refresh, controller, power, and the PIM units;
* :mod:`archsim.config.machine` — NPU, system composition, serving KV cache, GPU baseline,
  :class:`MachineConfig`
  and :func:`parallel_degrees`;
* :mod:`archsim.config.loading` — presets, YAML loading with ``base:`` inheritance, ``--set``
  overrides and the error messages (:func:`load_config`).

This package is a leaf: it imports nothing else from the project but the leaves
:mod:`archsim.errors`, :mod:`archsim.yamlfile` (reading the files), the memory standards
(:mod:`archsim.memory.standards`) and the energy schema (:mod:`archsim.energy.schema`), so
every layer (including ``mapping``, which must know the machine it compiles for) may import it.
Each config file is parsed once per process (cached by path, modification time and size).

Errors are :class:`archsim.errors.ConfigError` whose message names the file (or preset /
override), the dotted key, its line when known, and the allowed values or range; an unknown key
also lists the closest valid keys.

Units are in the names: ``*_cycles`` are cycles of the clock named by the section (NPU cycles
in ``npu``, memory-clock cycles ``tCK`` in ``memory``/``pim``), ``*_bytes`` bytes,
``*_mhz`` MHz, ``*_ma`` milliamperes, ``*_v`` volts, ``*_pj`` picojoules, ``*_bytes_per_s`` B/s.
"""
from __future__ import annotations

from archsim.config.base import CrossFieldError, FrozenSection
from archsim.config.loading import (PRESET_DIR, REMOVED_KEYS, closest_keys, config_to_yaml,
                                    list_presets, load_config, parse_override, valid_keys)
from archsim.config.machine import (GPU_MODE_KEYS, VECTOR_OPS, DmaConfig, GpuCalibration,
                                    GpuConfig, InterconnectConfig, MachineConfig,
                                    MoeRouterConfig, NpuConfig,
                                    ScratchpadConfig, ServingConfig, SystemConfig,
                                    VectorUnitConfig,
                                    parallel_degrees)
from archsim.config.memory import (ADDRESS_FIELDS, TIMING_RULES, ControllerConfig, MemoryConfig,
                                   OrgConfig, PimConfig, PowerConfig, RefreshConfig,
                                   TimingConfig, TimingRule, timing_rule_violations)
from archsim.energy.schema import AreaConfig, EnergyConfig, ProcessConfig
from archsim.yamlfile import (DuplicateKeyError, UniqueKeyLoader, parse_yaml_mapping,
                              read_text_file, yaml_key_lines)

__all__ = [
    "MachineConfig", "parallel_degrees", "NpuConfig", "VectorUnitConfig", "ScratchpadConfig",
    "DmaConfig",
    "MemoryConfig", "OrgConfig", "TimingConfig", "RefreshConfig", "ControllerConfig",
    "PowerConfig", "PimConfig", "SystemConfig", "ServingConfig", "InterconnectConfig",
    "MoeRouterConfig", "GpuConfig",
    "GpuCalibration", "GPU_MODE_KEYS", "EnergyConfig", "AreaConfig", "ProcessConfig",
    "load_config", "list_presets", "parse_override", "config_to_yaml", "ADDRESS_FIELDS",
    "parse_yaml_mapping", "yaml_key_lines", "read_text_file", "valid_keys", "closest_keys",
    "VECTOR_OPS", "TIMING_RULES", "TimingRule", "timing_rule_violations", "CrossFieldError",
    "REMOVED_KEYS", "PRESET_DIR", "FrozenSection", "DuplicateKeyError", "UniqueKeyLoader",
]
