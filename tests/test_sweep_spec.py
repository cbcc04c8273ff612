"""Sweep specs: validation messages (key and line), point generation, config hash (the area model: tests/test_energy_area.py)."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from archsim.config import load_config, parse_override
from archsim.sweep.errors import SweepSpecError
from archsim.sweep.space import format_override, grid_points, random_points, resolve_point
from archsim.sweep.spec import grid_size, load_spec

ROOT = Path(__file__).resolve().parents[1]

GOOD = """\
name: t
base: neupims
workload: {system: neupims, model: gpt3-7b, batch: 64}
parameters:
  pim.multipliers_per_bank: [8, 16, 32]
  npu.n_arrays: {low: 4, high: 12, step: 4}
  batch: [32, 64]
search: {kind: grid}
objectives:
  - {metric: tokens_per_s, goal: maximize}
  - {metric: area_proxy_mm2, goal: min}
constraints:
  - "area_proxy_mm2 <= 5000"
"""


def _spec(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def _error(tmp_path: Path, text: str) -> str:
    with pytest.raises(SweepSpecError) as exc:
        load_spec(_spec(tmp_path, text))
    return str(exc.value)


def test_good_spec_loads_with_grid_of_every_combination(tmp_path):
    spec = load_spec(_spec(tmp_path, GOOD))
    assert grid_size(spec) == 3 * 3 * 2
    pts = list(grid_points(spec))
    assert len(pts) == 18 and pts[0] == {"pim.multipliers_per_bank": 8, "npu.n_arrays": 4,
                                         "batch": 32}
    assert {p["npu.n_arrays"] for p in pts} == {4, 8, 12}
    # the KV-capacity constraint is implied for the default evaluator
    assert [c.describe() for c in spec.constraints] == ["area_proxy_mm2 <= 5000",
                                                        "kv_capacity_fraction <= 1"]
    assert spec.directions == ["maximize", "minimize"]


def test_shipped_examples_validate():
    # the quick GPU sweep is 24 cheap points; the cycle-level NeuPIMs example 16 points
    for name, points in (("sweep_gpu_quick.yaml", 24), ("sweep_neupims_gpt3_7b.yaml", 16),
                         ("sweep_scratchpad.yaml", 5)):
        spec = load_spec(ROOT / "examples" / name)
        assert grid_size(spec) == points


ERRORS = [
    # (spec text, fragments the message must contain: file:line, key, what is wrong)
    (GOOD.replace("  pim.multipliers_per_bank: [8, 16, 32]",
                  "  pim.multipliers_per_bnk: [8, 16, 32]"),
     [":5:", "parameters.pim.multipliers_per_bnk", "did you mean",
      "pim.multipliers_per_bank"]),
    (GOOD.replace("  - {metric: area_proxy_mm2, goal: min}",
                  "  - {metric: area_proxy_mm2, goal: smallest}"),
     [":11:", "objectives.1.goal", "maximize or minimize"]),
    (GOOD.replace("  - {metric: tokens_per_s, goal: maximize}",
                  "  - {metric: tokens_per_sec, goal: maximize}"),
     [":10:", "objectives.0.metric", "unknown metric 'tokens_per_sec'", "tokens_per_s"]),
    (GOOD.replace("search: {kind: grid}", "search: {kind: grid, count: 5}"),
     [":8:", "search", "count applies to random and optuna"]),
    (GOOD.replace("search: {kind: grid}", "search: {kind: random}"),
     [":8:", "search", "needs count"]),
    (GOOD.replace("name: t", "name: t\nsweeep: 3"),
     [":2:", "unknown key 'sweeep'", "valid keys here"]),
    (GOOD.replace("  batch: [32, 64]", "  batch: [32, -64]"),
     [":7:", "parameters.batch.1", "greater than or equal to 1"]),
    (GOOD.replace("  batch: [32, 64]", "  model: [gpt3-7b, gpt3-8b]"),
     [":7:", "parameters.model.1", "unknown model 'gpt3-8b'", "gpt3-13b"]),
    (GOOD.replace("npu.n_arrays: {low: 4, high: 12, step: 4}",
                  "npu.n_arrays: {low: 4.5, high: 12}"),
     [":6:", "parameters.npu.n_arrays", "needs step or num"]),
    (GOOD.replace("npu.n_arrays: {low: 4, high: 12, step: 4}",
                  "npu.n_arrays: {low: 12, high: 4}"),
     [":6:", "parameters.npu.n_arrays", "must be > low"]),
    (GOOD.replace("  - \"area_proxy_mm2 <= 5000\"", "  - \"area_proxy_mm2 < 5000\""),
     [":13:", "constraints.0", "expected 'METRIC <= VALUE'"]),
    (GOOD.replace("base: neupims", "base: neupimz"),
     [":2:", "base", "does not load", "presets"]),
    (GOOD.replace("workload: {system: neupims, model: gpt3-7b, batch: 64}",
                  "workload: {system: tpu, model: gpt3-7b, batch: 64}"),
     [":3:", "workload.system", "unknown system 'tpu'", "neupims"]),
    (GOOD + "set: {pim.multipliers_per_bank: 4}\n",
     [":5:", "parameters.pim.multipliers_per_bank", "both fixed under 'set' and swept"]),
    (GOOD.replace("objectives:\n  - {metric: tokens_per_s, goal: maximize}\n"
                  "  - {metric: area_proxy_mm2, goal: min}\n", ""),
     ["objectives", "required key is missing"]),
    ("name: t\nbase: neupims\n  workload: x\n", [":3:", "not valid YAML"]),
    (GOOD.replace("  batch: [32, 64]", "  batch: 64"),
     [":7:", "parameters.batch", "give a list of values or a range"]),
    (GOOD.replace("  batch: [32, 64]", "  serving.kv_block_tokens: [16, 32]"),
     [":7:", "parameters.serving.kv_block_tokens", "change nothing in a sweep point"]),
]


@pytest.mark.parametrize("text,fragments", ERRORS, ids=[f[1][1] for f in ERRORS])
def test_spec_error_names_key_and_line(tmp_path, text, fragments):
    msg = _error(tmp_path, text)
    assert msg.startswith(str(tmp_path / "spec.yaml")), msg
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in {msg!r}"


def test_invalid_point_is_recorded_not_raised(tmp_path):
    spec = load_spec(_spec(tmp_path, GOOD.replace("[8, 16, 32]", "[8, 0]")))
    pts = [resolve_point(spec, p) for p in grid_points(spec)]
    bad = [p for p in pts if p.error]
    assert len(bad) == len(pts) // 2
    assert "pim.multipliers_per_bank" in bad[0].error and "greater than or equal to 1" in \
        bad[0].error and bad[0].config is None
    assert len({p.key for p in pts}) == len(pts)


def test_config_hash_identifies_machine_and_workload_not_spelling(tmp_path):
    spec = load_spec(_spec(tmp_path, GOOD))
    a = resolve_point(spec, {"pim.multipliers_per_bank": 16, "npu.n_arrays": 8, "batch": 64})
    b = resolve_point(spec, {"npu.n_arrays": 8, "batch": 64, "pim.multipliers_per_bank": 16})
    c = resolve_point(spec, {"pim.multipliers_per_bank": 16, "npu.n_arrays": 8, "batch": 32})
    assert a.key == b.key != c.key
    assert a.config == load_config("neupims", ["npu.n_arrays=8"]).to_dict()


def test_random_search_is_seeded_and_without_replacement(tmp_path):
    text = GOOD.replace("search: {kind: grid}", "search: {kind: random, seed: 3, count: 7}")
    spec = load_spec(_spec(tmp_path, text))
    a, b = random_points(spec), random_points(spec)
    assert a == b and len(a) == 7
    assert len({tuple(sorted(p.items())) for p in a}) == 7
    assert all(p in list(grid_points(load_spec(_spec(tmp_path, GOOD)))) for p in a)


def test_random_search_over_a_continuous_range(tmp_path):
    text = GOOD.replace("search: {kind: grid}", "search: {kind: random, seed: 1, count: 5}")
    text = text.replace("npu.n_arrays: {low: 4, high: 12, step: 4}",
                        "gpu.gemm_efficiency: {low: 0.5, high: 0.9}")
    pts = random_points(load_spec(_spec(tmp_path, text)))
    assert len(pts) == 5 and all(0.5 <= p["gpu.gemm_efficiency"] <= 0.9 for p in pts)


@pytest.mark.parametrize("value", [16, 0.7, 1e-05, 3e16, "dual", True, [1, 2]])
def test_override_text_reads_back_the_same_value(value):
    _, back = parse_override(format_override("pim.row_buffer_mode", value))
    assert back == value and type(back) is type(value)


def test_spec_text_documents_every_error_with_one_line(tmp_path):
    msg = _error(tmp_path, GOOD.replace("batch: 64}", "batch: 64, batchsize: 3}"))
    assert "\n" not in msg and re.search(r"spec\.yaml:3: workload\.batchsize: unknown key",
                                         msg), msg
