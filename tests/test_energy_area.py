"""The area model (archsim.energy.area): each part follows its formula and constants, scales
with the keys it counts, and the node scaling follows Stillmaker & Baas."""
from __future__ import annotations

import pytest

from archsim.config import load_config
from archsim.energy.area import area_breakdown_mm2, static_metrics
from archsim.energy.technology import area_scale, energy_scale


def test_area_of_the_neupims_preset_follows_its_constants():
    cfg = load_config("neupims")
    b = area_breakdown_mm2(cfg)
    k = area_scale(45, 7)
    # 8 x 128 x 128 PEs of (fp16 mult 1640 + fp32 add 4184) um^2 at 45 nm, scaled to 7 nm
    assert b["area_npu_arrays_mm2"] == pytest.approx(8 * 128 * 128 * 5824e-6 * k)
    assert b["area_vector_mm2"] == pytest.approx(8 * 128 * 11884e-6 * k)
    assert b["area_sram_mm2"] == pytest.approx(32 * 2**20 * 8 * 0.346 / 0.5 * 1e-6 * k)
    # 32 channels x 32 banks x 16 multipliers x 5824 um^2 x 10 (DRAM process, not scaled)
    assert b["area_pim_mm2"] == pytest.approx(32 * 32 * 16 * 5824 * 10e-6)
    assert b["area_row_buffer_mm2"] == pytest.approx(32 * 32 * 1024 * 2.768 * 10e-6)
    parts = ("area_npu_arrays_mm2", "area_vector_mm2", "area_sram_mm2")
    assert b["area_npu_mm2"] == pytest.approx(sum(b[p] for p in parts))
    assert b["area_proxy_mm2"] == pytest.approx(
        b["area_npu_mm2"] + b["area_pim_mm2"] + b["area_row_buffer_mm2"])


def test_area_parts_follow_the_systems_engines():
    assert area_breakdown_mm2(load_config("gpu-a100")) is None
    assert static_metrics(load_config("gpu-a100"))["area_proxy_mm2"] is None
    dual = area_breakdown_mm2(load_config("neupims"))
    single = area_breakdown_mm2(load_config("npu-pim-blocked"))
    assert single["area_row_buffer_mm2"] == 0 and dual["area_row_buffer_mm2"] > 0
    assert area_breakdown_mm2(load_config("npu-only"))["area_pim_mm2"] == 0


def test_area_constants_are_config_keys():
    b = area_breakdown_mm2(load_config("neupims"))
    more = area_breakdown_mm2(load_config("neupims", ["area.dram_logic_factor.value=20"]))
    assert more["area_pim_mm2"] == pytest.approx(2 * b["area_pim_mm2"])
    assert more["area_npu_mm2"] == pytest.approx(b["area_npu_mm2"])
    old = area_breakdown_mm2(load_config("neupims", ["npu.process.node_nm=45"]))
    assert old["area_npu_arrays_mm2"] == pytest.approx(8 * 128 * 128 * 5824e-6)
    wide = area_breakdown_mm2(load_config("neupims", ["npu.n_arrays=16"]))
    assert wide["area_npu_arrays_mm2"] == pytest.approx(2 * b["area_npu_arrays_mm2"])


def test_stillmaker_baas_scaling_factors():
    # 45 nm at 0.9 V (Horowitz) to 7 nm at 0.7 V, and the corrigendum's 65 nm polynomial
    assert energy_scale(45, 0.9, 7, 0.7) == pytest.approx(0.0566, rel=2e-3)
    assert energy_scale(45, 0.9, 45, 0.9) == 1.0
    assert area_scale(45, 7) == pytest.approx(0.059)
    assert area_scale(7, 45) == pytest.approx(1 / 0.059)
    with pytest.raises(ValueError, match="outside"):
        area_scale(45, 5)
