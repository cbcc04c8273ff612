"""The energy model on a small cycle-level run: the NPU part is non-zero, its counts reconcile
with the executor's statistics, and each component is linear in exactly its own constant
(doubling one per-action energy doubles that component and leaves every other one alone)."""
from __future__ import annotations

import pytest

from archsim.config import load_config
from archsim.energy.counts import count_program, reconcile, ring_bytes_sent
from archsim.energy.table import energy_table
from archsim.memory.energy import command_energy
from archsim.serving import make_batch
from archsim.system import simulate
from workloads.models import get_model

MODEL = get_model("tiny-gpt")

#: constant -> the one component it prices (override path of its value)
LINEAR = {
    "energy.npu.mac_pj.value": "npu_mac",
    "energy.npu.vector_op_pj.value": "npu_vector",
    "energy.npu.leakage_w_per_mm2.value": "leakage",
    "energy.hbm_io_pj_per_byte.value": "dram_io",
    "energy.link_pj_per_byte.value": "link",
}


def _doubled(cfg, key: str) -> str:
    section, *rest = key.split(".")
    obj = cfg
    for part in key.split("."):
        obj = getattr(obj, part)
    return f"{key}={2 * obj}"


@pytest.fixture(scope="module")
def runs():
    """One neupims run of tiny-gpt, batch 8, per configuration (base + each doubling)."""
    base = load_config("neupims", ["system.tensor_parallel=2"])
    batch = make_batch(MODEL, 8, "sharegpt", 0, cfg=base)
    out = {"base": simulate(base, MODEL, batch)}
    for key in (*LINEAR, "energy.npu.sram.access_pj"):
        if key == "energy.npu.sram.access_pj":
            over = "energy.npu.sram.access_pj=[20, 40, 200]"
        else:
            over = _doubled(base, key)
        cfg = load_config("neupims", ["system.tensor_parallel=2", over])
        out[key] = simulate(cfg, MODEL, batch)
    return out


def test_npu_part_is_nonzero_and_counts_reconcile_with_the_executor(runs):
    run = runs["base"]
    res = run.result
    for k in ("npu_mac", "npu_vector", "sram", "dram_io", "link", "leakage", "pim", "dram_rd"):
        assert res.energy_j[k] > 0, k
    counts = count_program(run.window.compiled, load_config("neupims",
                                                            ["system.tensor_parallel=2"]))
    recon = reconcile(counts, run.window.stats)
    assert all(v["counted"] == v["executed"] > 0 for v in recon.values()), recon
    assert counts.macs == run.window.stats.macs
    # the all-reduces: one ring of each collective's bytes over the 2 devices
    sent = sum(ring_bytes_sent(c["bytes"], c["group"])
               for c in run.window.compiled.link_instructions() if c["instruction"] == "ALL_REDUCE")
    assert counts.link_bytes == pytest.approx(sent) and sent > 0
    # the run counted them from the compiled loop's pass over the instructions: the same counts
    assert run.window.action_counts is not None and run.window.action_counts == counts


def test_components_are_counts_times_the_table(runs):
    run = runs["base"]
    cfg = load_config("neupims", ["system.tensor_parallel=2"])
    t = energy_table(cfg)
    e = run.result.energy_j
    c = run.result.extra["energy"]["counts_system"]
    assert e["npu_mac"] == pytest.approx(c["macs"] * t.mac_pj * 1e-12)
    assert e["sram"] == pytest.approx((c["sram_read_bytes"] + c["sram_write_bytes"])
                                      * t.sram_read_pj_per_byte * 1e-12)
    assert e["link"] == pytest.approx(c["link_bytes"] * t.link_pj_per_byte * 1e-12)
    # the system's MACs: every layer of both devices plus the analytic LM head
    lm = run.result.extra["lm_head"]["macs"]
    win = run.result.extra["energy"]["window_counts"]["macs"]
    assert c["macs"] == pytest.approx(2 * (win + lm))
    assert sum(e.values()) / run.result.tokens * 1e6 == pytest.approx(
        run.result.energy_per_token_uj)


@pytest.mark.parametrize("key", [*LINEAR, "energy.npu.sram.access_pj"])
def test_doubling_a_constant_doubles_exactly_its_component(runs, key):
    base = runs["base"].result.energy_j
    other = runs[key].result.energy_j
    comp = LINEAR.get(key, "sram")
    assert other[comp] == pytest.approx(2 * base[comp], rel=1e-12)
    for k, v in base.items():
        if k != comp:
            assert other[k] == pytest.approx(v, rel=1e-12), k


def test_pim_comp_energy_is_the_bank_local_share_plus_macs():
    cfg = load_config("neupims")
    e = command_energy(cfg)
    # 804 pJ read burst x (16 fp16 = 32 B of 64 B) x 0.138 + 16 x 2 pJ
    assert e.comp_pj == pytest.approx(804 * 0.5 * 0.138 + 32)
    more = command_energy(load_config("neupims", ["energy.pim.mac_pj.value=4"]))
    assert more.comp_pj - e.comp_pj == pytest.approx(16 * 2)
    # per byte processed the COMP is ~1/4 of a read out of the device (Samsung HBM-PIM: the
    # same chip power at 4x the bandwidth)
    ratio = (e.comp_pj / 32) / (e.rd_pj / 64)
    assert 0.15 < ratio < 0.35


def test_sram_energy_grows_with_the_bank_like_the_table():
    small = energy_table(load_config("neupims", ["npu.scratchpad.banks=128"]))   # 256 KiB
    big = energy_table(load_config("neupims"))                                   # 1 MiB
    assert small.sram_bank_bytes == 256 * 1024 and big.sram_bank_bytes == 2**20
    # 1 MiB: exactly Horowitz's 100 pJ per 8-byte access, scaled to 7 nm
    assert big.sram_read_pj_per_byte == pytest.approx(100 / 8 * big.mac_pj / 2.0)
    assert small.sram_read_pj_per_byte < big.sram_read_pj_per_byte
