"""The key walk: every key of the machine configuration changes a result, or is listed with the
reason it does not change timing (issue 15, item 4: "no knob that silently does nothing").

Every leaf key of :class:`archsim.config.MachineConfig` (derived from the pydantic models by
:func:`archsim.configwalk.leaf_keys`, so a key added later is walked too) is set to another
allowed value (:func:`archsim.configwalk.alternative`: next Literal value, toggled bool, ×2 /
÷2 within its bounds, ... or the value given in :data:`WALKS`), and a small deterministic run
of the part it belongs to is compared with the same run before the change:

* ``memory`` keys: a 4,000-request mixed trace (sequential, random, writes, then a sparse
  phase) replayed on 2 channels by the compiled controller (``run_requests``);
* ``pim`` keys the compiled programs never reach: a PIM command sequence (GWRITE, G_ACT, COMP,
  READRES, PIM_GEMV, PIM_PRECHARGE) with memory reads beside it, through ``MemorySystem``;
* ``npu`` / ``pim`` / ``system`` / ``energy`` / ``area`` keys: one decode iteration of a tiny
  model (2 layers, batch 8) compiled and simulated on the whole system (``simulate``);
* ``gpu`` keys: the GPU model on GPT3-7B, batch 256 (its GEMMs compute-bound);
* ``serving`` keys: a serving run of 60 ShareGPT-like requests of tiny-gpt on the GPU model
  with a memory that leaves ~2,900 KV tokens, so that the KV cache preempts (``serve``).

Each run yields named outputs (:func:`_outputs`): ``timing`` (cycles, per-layer cycles,
stages, command counts, latencies, stalls, utilisations), ``energy``, ``area``, ``capacity``,
``cosim`` (the Verilog parameters of the RTL blocks), ``report`` (labels and the GPU model's
description) and ``config`` (the effective configuration, as ``archsim config show`` prints
it). A key must change ``timing``, unless :data:`NOT_TIMING` lists it with the reason — then
it must leave ``timing`` alone *and* change every output it claims. A key that does neither
fails: make the model read it, list it with the reason, or remove it (:data:`archsim.config.
REMOVED_KEYS` gives old files a clear error). Baselines are computed once per context.
"""
from __future__ import annotations

import fnmatch
import functools
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest

from archsim.config import REMOVED_KEYS, config_to_yaml, load_config
from archsim.configwalk import (STRING_MARK, alternative, candidate_values, get_value,
                                leaf_keys, override_text)
from archsim.errors import ArchsimError, ConfigError

# --------------------------------------------------------------------------------------------
# What each key is walked under (data)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Walk:
    """How one key is walked.

    Attributes:
        part: ``memory`` (trace replay), ``pim`` (PIM command sequence), ``layer`` (compiled
            tiny model on the whole system), ``gpu`` (GPU model) or ``serve`` (serving run).
        base: preset the walk starts from.
        sets: the context: ``--set`` overrides applied to the baseline and the change alike.
        model, batch: the workload of ``layer`` and ``gpu`` runs.
        values: values to try instead of the generic candidates (in order).
        companions: ``--set`` overrides applied with the new value (a rule ties the keys).
        why: why this context or value (printed when the key fails).
    """

    part: str = "layer"
    base: str = "neupims"
    sets: tuple[str, ...] = ()
    model: str = "tiny-gpt"
    batch: int = 8
    values: tuple | None = None
    companions: tuple[str, ...] = ()
    why: str = ""


MEMORY = Walk(part="memory", sets=("memory.org.channels=2",))
GPU = Walk(part="gpu", base="gpu-a100", model="gpt3-7b", batch=256)
SERVE = Walk(part="serve", base="gpu-a100", sets=("gpu.memory_bytes=4000000",), batch=60)
LLAMA = dict(model="tiny-llama", why="tiny-gpt has no RMSNorm, SwiGLU (SiLU, MUL) or RoPE")
NPU_ATTENTION = dict(base="npu-only", why="VU_DOT runs attention on the NPU (no PIM)")
TP2 = dict(sets=("system.tensor_parallel=2",),
           why="tensor parallel: all-reduces cross the interconnect (tiny-gpt's default is 1)")
OP_CONTEXT = {"rmsnorm": LLAMA, "silu": LLAMA, "rope": LLAMA, "mul": LLAMA,
              "dot": NPU_ATTENTION}
ROOFLINE = dict(sets=("gpu.mode=roofline",), why="read only by the roofline GPU mode")
PER_BANK = dict(sets=("memory.refresh.mode=per_bank",), why="per-bank refresh timing")
HBM3 = dict(sets=("memory.kind=hbm3",), why="exists in HBM3 only")
DRAIN = dict(sets=("memory.controller.write_policy=drain",), why="drain write policy only")

#: Keys walked with a context or value other than their part's default: {key: Walk fields}.
#: ``sets`` add to the part's own context.
WALKS: dict[str, dict[str, Any]] = {
    "npu.n_arrays": dict(values=(2,), why="tiny-gpt's GEMMs have at most 4 weight tiles: 8 "
                                         "and 16 arrays run them all at once"),
    "npu.scratchpad.size_bytes": dict(values=(1 << 20,),
                                      why="tiny-gpt fits 32 and 64 MiB alike; 1 MiB makes the "
                                          "compiler block its GEMM chains"),
    "npu.dma.max_outstanding": dict(values=(256,), why="a tiny layer never has 4,096 requests "
                                                       "in flight"),
    "pim.mode_switch_cycles": dict(sets=("pim.row_buffer_mode=single",),
                                   why="paid only by a single-row-buffer (blocked) channel"),
    "pim.readres_cycles": dict(sets=("pim.row_buffer_mode=single", "pim.commands=newton"),
                               why="neupims programs fuse READRES into PIM_GEMV; the Newton "
                                   "command set issues stand-alone READRESes"),
    "pim.commands": dict(sets=("pim.row_buffer_mode=single",),
                         why="newton needs the single row buffer (Newton has one per bank)"),
    "system.sub_batch_policy": dict(batch=64, why="8 requests on 32 channels: one per channel, "
                                                  "both policies split them alike"),
    "system.interconnect.bandwidth_bytes_per_s": TP2,
    "system.interconnect.allreduce": TP2,
    "system.sub_batches": dict(values=(1, "auto"), why="the preset's 2 -> 1 (no interleaving)"),
    "system.max_sub_batches": dict(batch=64, sets=("system.sub_batches=auto",), values=(1,),
                                   why="with sub_batches auto, two sub-batches win on 64 "
                                       "requests; a maximum of 1 forbids them"),
    "system.interconnect.latency_ns": TP2,
    "system.micro_batches": dict(sets=("system.pipeline_parallel=2",),
                                 why="micro-batches flow through pipeline stages (tiny-gpt's "
                                     "default is one stage)"),
    "serving.swap_bandwidth_bytes_per_s": dict(sets=("serving.preemption=swap",),
                                               why="read only by swap preemption"),
    "system.expert_parallel": dict(model="tiny-mixtral", values=(2,),
                                   why="experts split over devices: a mixture of experts only "
                                       "(a dense model refuses the key)"),
    "system.moe_router.zipf_exponent": dict(model="tiny-mixtral",
                                            why="the router model of mixture-of-experts "
                                                "timing runs (a dense model refuses the key)"),
    "system.moe_router.seed": dict(model="tiny-mixtral",
                                   why="the router model of mixture-of-experts timing runs (a "
                                       "dense model refuses the key)"),
    "energy.link_pj_per_byte.value": TP2,
    "memory.timing.tCK_ns": dict(part="layer", why="a trace is in tCK; the NPU/memory clock "
                                                   "ratio is where the period matters"),
    "memory.org.rows": dict(part="layer", why="capacity is an output of the whole system"),
    "memory.org.ranks": dict(values=(1,), why="64 banks per channel exceed the compiled "
                                              "kernel's 63-bank masks"),
    "memory.org.bank_groups": dict(values=(2,), why="as memory.org.ranks"),
    "memory.org.banks_per_group": dict(values=(2,), why="as memory.org.ranks"),
    "memory.org.columns": dict(companions=("memory.org.page_size_bytes=2048",),
                               why="page_size_bytes = columns × column_width_bits / 8"),
    "memory.org.column_width_bits": dict(companions=("memory.org.page_size_bytes=2048",),
                                         why="page_size_bytes = columns × column_width_bits / 8"),
    "memory.org.page_size_bytes": dict(companions=("memory.org.columns=128",),
                                       why="page_size_bytes = columns × column_width_bits / 8"),
    "memory.timing.tCCD_S": dict(sets=("memory.timing.tCCD_L=4",), values=(3,),
                                 why="a burst holds the data bus BL/2 = 2 cycles, so tCCD_S <= 2 "
                                     "is hidden; tCCD_L >= tCCD_S"),
    "memory.timing.tRFCpb": PER_BANK, "memory.timing.tRREFD": PER_BANK,
    "memory.timing.tREFIpb": PER_BANK,
    "memory.timing.tRTW": HBM3, "memory.timing.tPPD": HBM3,
    "memory.controller.page_timeout_cycles": dict(
        sets=("memory.controller.page_policy=timeout",), why="timeout page policy only"),
    "memory.controller.row_hit_cap": dict(sets=("memory.controller.scheduler=fr_fcfs_cap",),
                                          why="fr_fcfs_cap scheduler only"),
    "memory.controller.write_queue_size": {**DRAIN, "values": (8,)},
    "memory.controller.write_high_watermark": DRAIN,
    "memory.controller.write_low_watermark": DRAIN,
    "memory.controller.queue_size_per_bank": dict(values=(4,), why="the trace never queues 32 "
                                                                   "bursts at one bank"),
    "memory.controller.address_mapping": dict(values=("robgbarachco",),
                                              why="a permutation of the six fields"),
    "gpu.gemm_efficiency": ROOFLINE, "gpu.gemv_efficiency": ROOFLINE,
    "gpu.vector_efficiency": ROOFLINE, "gpu.kernel_launch_us": ROOFLINE,
    **{f"npu.vector.{table}.{op}": ctx for table in ("latency_cycles", "passes")
       for op, ctx in OP_CONTEXT.items()},
    **{f"energy.npu.vector_ops_per_element.ops.{op}": ctx for op, ctx in OP_CONTEXT.items()},
}

#: Keys that do not change timing, by pattern (first match): (reason, outputs it must change).
NOT_TIMING: dict[str, tuple[str, tuple[str, ...]]] = {
    "name": ("a label: names the machine in results and reports", ("report",)),
    "gpu.name": ("a label: names the GPU in the model's description", ("report",)),
    "*.source": ("provenance of a constant: printed by `archsim config show`, saved with "
                 "results; no model reads it", ("config",)),
    "gpu.calibrated.fit": ("provenance of the calibrated efficiencies (which points, what "
                           "error)", ("config",)),
    "gpu.calibrated.max_error": ("a tolerance: `python -m archsim.gpu.calibration` checks the "
                                 "fit's points against it; stated in the model's description",
                                 ("report",)),
    "npu.dtype_bytes": ("the hardware's operand width: bytes a PIM COMP step reads (energy) "
                        "and the data width of the RTL blocks; the workload's element type is "
                        "the model's dtype_bytes", ("energy", "cosim")),
    "npu.scratchpad.banks": ("prices an SRAM access at one bank's capacity; the timing model "
                             "has no bank conflicts", ("energy",)),
    "npu.process.node_nm": ("the logic node the energy and area constants scale to",
                            ("energy", "area")),
    "npu.process.vdd_v": ("the supply the energy constants scale to", ("energy",)),
    "pim.acc_bits": ("accumulator width of the RTL PIM MAC; the timing and functional models "
                     "accumulate in fp32", ("cosim",)),
    "memory.power.*": ("IDD currents and VDD: the DRAM energy (IDD method)", ("energy",)),
    "memory.org.rows": ("rows per bank: the device capacity; JEDEC timing does not depend "
                        "on the row count", ("capacity",)),
    "gpu.memory_bytes": ("GPU memory capacity: the KV budget of serving", ("capacity",)),
    "energy.*": ("the energy table: prices actions, never times them", ("energy",)),
    "area.*": ("the area model (and through the NPU die area, leakage)", ("area",)),
}

#: Keys with one allowed value: they state what is modelled; any other value is rejected.
SINGLE_VALUED: dict[str, str] = {
    "npu.dataflow": "the tile formula of archsim.npu.timing is weight-stationary",
}

KEYS = [lf.key for lf in leaf_keys(load_config("neupims"))]


def walk_of(key: str) -> Walk:
    """The :class:`Walk` of ``key``: its part's default (by section), with :data:`WALKS`
    applied (``sets`` add to the part's own context)."""
    extra = dict(WALKS.get(key, {}))
    part = extra.pop("part", None) or ("memory" if key.startswith("memory.") else
                                       "gpu" if key.startswith(("gpu.", "energy.gpu."))
                                       else "serve" if key.startswith("serving.")
                                       else "layer")
    w = {"memory": MEMORY, "gpu": GPU, "layer": Walk(), "pim": Walk(part="pim"),
         "serve": SERVE}[part]
    return replace(w, sets=w.sets + tuple(extra.pop("sets", ())), **extra)


def not_timing(key: str) -> tuple[str, tuple[str, ...]] | None:
    """The :data:`NOT_TIMING` entry of ``key`` (first matching pattern), or None."""
    for pattern, entry in NOT_TIMING.items():
        if fnmatch.fnmatchcase(key, pattern):
            return entry
    return None


# --------------------------------------------------------------------------------------------
# The runs
# --------------------------------------------------------------------------------------------
def _trace() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """4,000 requests of 64 B: a dense phase (1,500 sequential reads, 1,300 random reads over
    256 MiB, 800 random writes over 64 MiB, shuffled, 4 per cycle), then a sparse phase (400
    requests 80 cycles apart, 30 % writes) in which rows go idle and refreshes fall due."""
    rng = np.random.default_rng(7)
    seq = np.arange(1500, dtype=np.int64) * 64
    rnd = rng.integers(0, (256 << 20) // 64, 1300) * 64
    wr = rng.integers(0, (64 << 20) // 64, 800) * 64
    dense = np.concatenate([seq, rnd, wr])
    dense_w = np.r_[np.zeros(2800, bool), np.ones(800, bool)]
    o = rng.permutation(dense.size)
    dense, dense_w = dense[o], dense_w[o]
    t_dense = np.arange(dense.size) // 4
    sparse = rng.integers(0, (16 << 20) // 64, 400) * 64
    t_sparse = t_dense[-1] + 2000 + np.arange(400) * 80
    addrs = np.concatenate([dense, sparse])
    return (addrs, np.full(addrs.size, 64), np.r_[dense_w, rng.random(400) < 0.3],
            np.r_[t_dense, t_sparse])


def _memory_run(cfg) -> dict[str, Any]:
    from archsim.memory.runner import run_requests

    r = run_requests(cfg, *_TRACE)
    s = r.stats
    return {"timing": {"cycles": s["sim_cycles"], "commands": dict(s["commands"]),
                       "latencies": tuple(r.latencies.tolist()), "row_hits": s["row_hit_rate"]},
            "energy": dict(s["energy_pj"])}


def _pim_run(cfg) -> dict[str, Any]:
    """Two channels each run two row-GEMVs announced by a PIM_HEADER — GWRITE, G_ACT, COMP
    ×4 + READRES (the first) or PIM_GEMV (the second), PIM_PRECHARGE — one command in flight,
    while 64 reads stream past on channel 0."""
    from archsim.memory.system import MemorySystem
    from archsim.memport import MemRequest, PimOpKind, PimRequest

    mem = MemorySystem(cfg)
    K = PimOpKind
    seq = [(K.HEADER, 0, 2), (K.GWRITE, 0, 0), (K.G_ACT, 5, 0), (K.COMP, 0, 4),
           (K.READRES, 0, 0), (K.PRECHARGE, 0, 0), (K.GWRITE, 0, 0), (K.G_ACT, 9, 0),
           (K.GEMV, 0, 8), (K.PRECHARGE, 0, 0)]
    todo = {c: list(seq) for c in (0, 1)}
    for i in range(64):
        mem.submit(MemRequest(10_000 + i, i * 64 * cfg.memory.org.channels, 64, False, i))
    done: dict[int, int] = {}
    wait: dict[int, int] = {}
    now, rid = 0, 0
    while todo[0] or todo[1] or wait or len(done) < 64:
        for c in (0, 1):
            if todo[c] and c not in wait and mem.can_accept_pim(c):
                kind, row, n = todo[c].pop(0)
                rid += 1
                mem.submit_pim(PimRequest(rid, c, kind, now, row=row, n_comps=n))
                wait[c] = rid
        nxt = mem.next_event_cycle()
        now = max(now + 1, nxt if nxt is not None else now + 1)
        for comp in mem.advance_to(now):
            done[comp.req_id] = comp.cycle
            wait = {c: r for c, r in wait.items() if r != comp.req_id}
        assert now < 10**6, "PIM sequence did not finish (simulator bug)"
    st = mem.stats()
    return {"timing": {"completions": dict(sorted(done.items())),
                       "commands": dict(st["commands"])},
            "energy": dict(st["energy_pj"])}


@functools.lru_cache(maxsize=None)
def _workload(model: str, batch: int):
    from workloads.models import get_model
    from workloads.requests import default_batch

    m = get_model(model)
    return m, default_batch(m, batch, "sharegpt", seed=0)


def _cosim(cfg) -> dict[str, Any]:
    """The Verilog parameters of every RTL block (or the reason a block refuses ``cfg``)."""
    from archsim.cosim.params import verilog_parameters

    out = {}
    for block, dtype in (("systolic_array", None), ("pim_mac", None), ("pim_mac_fp", "fp16"),
                         ("bank_dual_rowbuf", None), ("isa_decoder", None)):
        try:
            out[block] = verilog_parameters(block, cfg, dtype)
        except ArchsimError as exc:
            out[block] = f"rejected: {exc}"
    return out


def _static(cfg, model) -> dict[str, Any]:
    from archsim.energy.area import area_breakdown_mm2, static_metrics
    from archsim.serving import kv_budget

    b = kv_budget(cfg, model)
    return {"area": area_breakdown_mm2(cfg),
            "capacity": (static_metrics(cfg)["memory_capacity_bytes"], b.capacity_tokens),
            "config": config_to_yaml(cfg)}


def _layer_run(cfg, w: Walk) -> dict[str, Any]:
    from archsim.system import simulate

    model, batch = _workload(w.model, w.batch)
    r = simulate(cfg, model, batch, with_events=False).result
    mem = r.extra["memory"]
    timing = {"cycles": r.cycles_per_iteration, "seconds": r.seconds_per_iteration,
              "layers": r.layer_cycles, "stages": r.stage_seconds,
              "commands": mem.get("commands"), "mem_cycles": mem.get("sim_cycles"),
              "latency": mem.get("latency_avg_cycles"), "stalls": r.extra["npu"]["stall_cycles"],
              "pim_util": r.pim_util, "bw_util": r.channel_bw_util}
    return {"timing": timing, "energy": r.energy_j, "cosim": _cosim(cfg),
            "report": (r.system, r.config_name), **_static(cfg, model)}


def _gpu_run(cfg, w: Walk) -> dict[str, Any]:
    from archsim.gpu.roofline import describe_gpu_model, simulate_gpu_iteration

    model, batch = _workload(w.model, w.batch)
    r = simulate_gpu_iteration(cfg, model, batch, with_events=False)
    return {"timing": {"seconds": r.seconds_per_iteration, "stages": r.stage_seconds},
            "energy": r.energy_j, "report": describe_gpu_model(cfg), **_static(cfg, model)}


def _serve_run(cfg, w: Walk) -> dict[str, Any]:
    """A serving run of ``w.batch`` ShareGPT-like requests (all at t = 0) on ``cfg``."""
    from archsim.serving import make_request_set, serve_system
    from workloads.requests import sample_requests

    model, _ = _workload(w.model, 1)
    b = sample_requests("sharegpt", w.batch, seed=0, max_seq_len=model.max_seq_len)
    rs = make_request_set([r.input_len for r in b], [r.output_len for r in b], model)
    r = serve_system(cfg, model, rs)
    return {"timing": {"finish": [q.finish_s for q in r.requests],
                       "first": [q.first_token_s for q in r.requests],
                       "iterations": r.iterations, "preemptions": r.preemptions,
                       "swap_s": r.swap_s},
            "report": r.scheduler, **_static(cfg, model)}


_TRACE = _trace()


def _outputs(cfg, w: Walk) -> dict[str, Any]:
    """The named outputs of ``w.part``'s run on ``cfg`` (see the module docstring)."""
    if w.part == "memory":
        return {**_memory_run(cfg), "config": config_to_yaml(cfg)}
    if w.part == "pim":
        return {**_pim_run(cfg), "config": config_to_yaml(cfg)}
    if w.part == "gpu":
        return _gpu_run(cfg, w)
    if w.part == "serve":
        return _serve_run(cfg, w)
    return _layer_run(cfg, w)


@functools.lru_cache(maxsize=None)
def _baseline(w: Walk) -> dict[str, Any]:
    return _outputs(load_config(w.base, list(w.sets)), w)


# --------------------------------------------------------------------------------------------
# The walk
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", [k for k in KEYS if k not in SINGLE_VALUED])
def test_changing_the_key_changes_timing_or_what_it_is_listed_for(key):
    w = walk_of(key)
    value, cfg = alternative(key, w.base, w.sets, list(w.values) if w.values else None,
                             w.companions)
    before = _baseline(replace(w, values=None, companions=(), why=""))
    after = _outputs(cfg, w)
    changed = sorted(o for o in after if after[o] != before.get(o))
    change = f"{override_text(key, value)} (under {w.base} {list(w.sets)}; {w.why or 'default'})"
    listed = not_timing(key)
    if listed is None:
        assert "timing" in changed, (
            f"{change} changed no timing of the {w.part} run (changed: {changed or 'nothing'}): "
            "a knob that silently does nothing — make the model read it, list it in NOT_TIMING "
            "with the reason, or remove it (archsim.config.REMOVED_KEYS)")
        return
    reason, claims = listed
    assert "timing" not in changed, (
        f"{change} is listed as not affecting timing ({reason}), but the {w.part} run's timing "
        "changed: take it off NOT_TIMING")
    missing = [c for c in claims if c not in changed]
    assert not missing, (f"{change}: listed as '{reason}', but its {missing} did not change "
                         f"(changed: {changed or 'nothing'})")


@pytest.mark.parametrize("key", sorted(SINGLE_VALUED))
def test_a_single_valued_key_rejects_every_other_value(key):
    cfg = load_config("neupims")
    lf = {x.key: x for x in leaf_keys(cfg)}[key]
    assert candidate_values(cfg, lf) == [], f"{key} has alternatives: walk it instead"
    other = str(get_value(cfg, key)) + "_x"
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config("neupims", [override_text(key, other)])


@pytest.mark.parametrize("key", sorted(REMOVED_KEYS))
def test_a_removed_key_is_rejected_as_not_modelled(key, tmp_path):
    with pytest.raises(ConfigError, match=rf"{key}=1.*is not modelled .*; remove it$"):
        load_config("neupims", [f"{key}=1"])
    parts = key.split(".")
    text = "base: neupims\n" + "".join(f"{'  ' * i}{p}:\n" for i, p in enumerate(parts[:-1])) \
        + f"{'  ' * (len(parts) - 1)}{parts[-1]}: 1\n"
    path = tmp_path / "old.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"old\.yaml:{len(parts) + 1}: {key} is not modelled"):
        load_config(path)


def test_the_walk_covers_every_leaf_key_and_its_tables_name_only_real_keys():
    keys = set(KEYS)
    assert len(keys) == len(KEYS) > 150
    assert not keys & set(REMOVED_KEYS), "a removed key is back in the schema"
    for table in (WALKS, SINGLE_VALUED):
        stale = sorted(set(table) - keys)
        assert not stale, f"entries for keys that do not exist: {stale}"
    unused = [p for p in NOT_TIMING if not fnmatch.filter(KEYS, p)]
    assert not unused, f"NOT_TIMING patterns matching no key: {unused}"
    # dict-valued settings are walked entry by entry, nested sections leaf by leaf
    assert "npu.vector.latency_cycles.softmax" in keys and "memory.timing.tRCDRD" in keys
    assert "energy.npu.vector_ops_per_element.ops.gelu" in keys


def test_leaf_keys_follow_the_schema_so_a_new_key_is_walked():
    from pydantic import create_model

    from archsim.config import NpuConfig

    extended = create_model("X", __base__=NpuConfig, new_knob=(int, 3))
    got = [lf.key for lf in leaf_keys(model=extended, prefix="npu.")]
    assert got[-1] == "npu.new_knob" and "npu.dma.issue_per_cycle" in got


def test_candidate_values_come_from_the_type_and_the_bounds():
    cfg = load_config("neupims")
    lf = {x.key: x for x in leaf_keys(cfg)}

    def cand(key):
        return candidate_values(cfg, lf[key])

    assert cand("memory.refresh.enabled") == [False]
    assert cand("memory.controller.page_policy") == ["closed", "closed_adaptive", "timeout"]
    assert cand("pim.multipliers_per_bank")[:2] == [32, 8]
    assert cand("gpu.gemm_efficiency")[:2] == [0.35, 0.85]          # 1.4 is above le=1
    assert cand("memory.controller.page_timeout_cycles")[:2] == [2, 4]  # unset optional
    assert cand("system.engines")[0] == ["npu"]
    assert cand("name") == ["neupims" + STRING_MARK]
