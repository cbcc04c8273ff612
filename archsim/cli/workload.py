"""``archsim workload``: inspect the operator graph the framework runs for a model and a batch.

``archsim workload show --model gpt3-7b --phase decode --batch 256 --dataset sharegpt`` prints one
decoder layer on one tensor-parallel device for one iteration: a row per operator (per-request
attention operators aggregated into one row per kind, with the request count), FLOPs, bytes,
arithmetic intensity and the engine class that suits it, then totals. ``--json PATH`` writes the
same plus every operator, every edge and the batch.

Engine-class rule (a heuristic for reading the table; the mapper makes the real placement):

* ``ALLREDUCE`` -> ``interconnect``; ``KV_APPEND`` and ``EMBEDDING`` (plain writes / gathers)
  -> ``DMA``;
* matrix operators (``GEMM``, ``ATTENTION_SCORE``, ``ATTENTION_CONTEXT``) -> ``PIM`` when their
  arithmetic intensity is below :data:`PIM_MAX_FLOP_PER_BYTE`, else ``systolic array``;
* everything else (norms, softmax, activation, elementwise) -> ``vector unit``.

Why 16 FLOP/B: a Newton-style PIM bank does 16 fp16 MACs (32 FLOP) per 32-byte column burst, i.e.
1 FLOP per byte of in-bank data, and cannot reuse a row across query vectors; its internal
bandwidth is ``32 banks x 32 B / tCCD_L (2 cycles) = 512 B/cycle`` per channel against 32 B/cycle
on the external bus (DESIGN.md §3), 16x. An operator of intensity ``I`` runs on the NPU at
``I x external bandwidth`` (while below the NPU ridge point, 8 x 128 x 128 x 2 FLOP / 1024 B =
256 FLOP/B) and on PIM at ``16 x external bandwidth x 1 FLOP/B``, so PIM wins when ``I < 16``.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from workloads.errors import WorkloadError
from workloads.graph import OpGroup, OpKind, aggregate_ops, build_layer_graph, graph_totals, \
    iter_ops
from workloads.models import ModelSpec, get_model, list_models, load_hf_config
from workloads.requests import (BUILTIN_DATASETS, Batch, LengthTable, default_batch,
                                load_request_file, sample_requests, warmup_decode_snapshot)

#: Requests in a generated batch when ``--batch`` is not given.
DEFAULT_BATCH = 256

#: Matrix operators below this arithmetic intensity (FLOP/byte) suit PIM (see module docstring).
PIM_MAX_FLOP_PER_BYTE = 16.0

ENGINE_SA, ENGINE_PIM, ENGINE_VECTOR = "systolic array", "PIM", "vector unit"
ENGINE_NET, ENGINE_DMA = "interconnect", "DMA"
_MATRIX = (OpKind.GEMM, OpKind.ATTENTION_SCORE, OpKind.ATTENTION_CONTEXT)


def suited_engine(kind: OpKind, flop_per_byte: float) -> str:
    """Engine class that suits an operator of ``kind`` and arithmetic intensity (FLOP/byte).

    Returns one of ``'systolic array'``, ``'PIM'``, ``'vector unit'``, ``'interconnect'``,
    ``'DMA'`` by the rule in the module docstring.
    """
    if kind in (OpKind.ALLREDUCE, OpKind.ALLTOALL):
        return ENGINE_NET
    if kind in (OpKind.KV_APPEND, OpKind.EMBEDDING):
        return ENGINE_DMA
    if kind in _MATRIX:
        return ENGINE_PIM if flop_per_byte < PIM_MAX_FLOP_PER_BYTE else ENGINE_SA
    return ENGINE_VECTOR


def _si(x: float, unit: str = "") -> str:
    """Engineering notation with an SI prefix: 6.44e9 -> '6.44 G'."""
    if x == 0:
        return f"0 {unit}".rstrip()
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}".rstrip()


def _intensity(flops: int, nbytes: int) -> float | None:
    return None if nbytes == 0 else flops / nbytes


def _shape_text(g: OpGroup) -> str:
    s = g.shape
    if g.kind is OpKind.GEMM:
        return f"M{s['m']} K{s['k']} N{s['n']}"
    if g.kind is OpKind.ATTENTION_SCORE:     # per KV head: Q [m, hd] x K^T [hd, L]
        txt = f"{s['batch']}x[M{s['m']} K{s['k']} N=L]"
    elif g.kind is OpKind.ATTENTION_CONTEXT:  # per KV head: P [m, L] x V [L, hd]
        txt = f"{s['batch']}x[M{s['m']} K=L N{s['n']}]"
    elif g.kind is OpKind.SOFTMAX:
        txt = f"{s['rows']}xL"
    else:
        txt = f"{s['rows']}x{s['cols']}"
    if g.seq_len_min is not None:
        txt += f", L {g.seq_len_min}..{g.seq_len_max}"
    return txt


def _make_batch(model: ModelSpec, phase: str, requests: Path | None, n: int | None,
                dataset: str, seed: int, channels: int, policy: str) -> Batch:
    """The batch to show: from ``requests`` (snapshot or length population) or a dataset.

    A decode snapshot (``.csv``) is used as is (its first ``n`` requests when ``n`` is given);
    a length population (``.tsv``/``.json``) or a built-in dataset is warmed up into a decode
    batch of ``n`` (default 256) requests, or sampled into ``n`` prefill requests.
    """
    if policy not in ("min_load", "round_robin"):
        raise WorkloadError(f"--policy {policy!r} not one of ['min_load', 'round_robin']")
    if requests is not None:
        loaded = load_request_file(requests)
        if isinstance(loaded, Batch):                        # a decode snapshot: use as is
            if n is not None and n < len(loaded):
                return Batch(loaded.requests[:n], f"{loaded.source} (first {n})")
            return loaded
        n = DEFAULT_BATCH if n is None else n
        pool: LengthTable = loaded                            # a length population: draw from it
        if phase == "decode":
            return warmup_decode_snapshot(pool, n, model.max_seq_len, seed, n_channels=channels,
                                          policy=policy)  # type: ignore[arg-type]
        return sample_requests(pool, n, seed, max_seq_len=model.max_seq_len)
    n = DEFAULT_BATCH if n is None else n
    if dataset not in BUILTIN_DATASETS:
        raise WorkloadError(f"--dataset {dataset!r} not one of {list(BUILTIN_DATASETS)}")
    if phase == "decode":
        return default_batch(model, n, dataset, seed, n_channels=channels,
                             policy=policy)  # type: ignore[arg-type]
    return sample_requests(dataset, n, seed, max_seq_len=model.max_seq_len)


def workload_report(model: ModelSpec, phase: str, batch: Batch, tp: int) -> dict[str, Any]:
    """Everything ``workload show`` prints or writes, as a JSON-serialisable dict.

    Keys: ``what`` (the caption), ``model``, ``phase``, ``tp``, ``layer``, ``batch`` (summary and
    per-request ``id, seq_len, channel, input_len, output_len``), ``totals``, ``by_engine``,
    ``groups`` (the table rows), ``ops`` (every operator with ``arithmetic_intensity`` and
    ``engine``), ``edges`` (``[producer, consumer, tensor, size_bytes]``) and ``routing`` (a
    mixture of experts: where the experts' rows came from, the uniform router model with seed
    0; None for a dense model).
    """
    g = build_layer_graph(model, phase, batch, tp=tp)
    totals = graph_totals(g)
    tokens = g.graph["tokens"]
    what = (f"{model.name} {phase}: one decoder layer (layer 0 of {model.n_layers}) on one "
            f"tensor-parallel device (tp={tp}), one {phase} iteration of {len(batch)} requests "
            f"({tokens} tokens). FLOPs count 2 per MAC; bytes assume each operator reads its "
            f"inputs from and writes its outputs to DRAM (no fusion); engine = heuristic from "
            f"kind and FLOP/byte (PIM below {PIM_MAX_FLOP_PER_BYTE:g}).")
    ops = []
    by_engine: dict[str, dict[str, int]] = {}
    for op in iter_ops(g):
        ai = _intensity(op.flops, op.bytes_total)
        eng = suited_engine(op.kind, math.inf if ai is None else ai)
        d = op.to_json()
        d.update(arithmetic_intensity=ai, engine=eng)
        ops.append(d)
        e = by_engine.setdefault(eng, {"ops": 0, "flops": 0, "bytes": 0})
        e["ops"] += 1
        e["flops"] += op.flops
        e["bytes"] += op.bytes_total
    groups = []
    for grp in aggregate_ops(g):
        ai = _intensity(grp.flops, grp.bytes_total)
        d = grp.to_json()
        d.update(arithmetic_intensity=ai, engine=suited_engine(grp.kind,
                                                               math.inf if ai is None else ai),
                 shape_text=_shape_text(grp))
        groups.append(d)
    totals_out = dict(totals, tokens=tokens, bytes_total=totals["bytes_read"] +
                      totals["bytes_written"])
    totals_out["arithmetic_intensity"] = _intensity(totals["flops"], totals_out["bytes_total"])
    return {
        "what": what,
        "model": model.as_dict(),
        "phase": phase,
        "tp": tp,
        "layer": 0,
        "batch": dict(batch.summary(), per_request=[
            {"id": r.id, "seq_len": r.seq_len, "channel": r.channel, "input_len": r.input_len,
             "output_len": r.output_len} for r in batch]),
        "totals": totals_out,
        "by_engine": by_engine,
        "groups": groups,
        "ops": ops,
        "edges": [[u, v, d["tensor"], d["size_bytes"]] for u, v, d in g.edges(data=True)],
        "routing": g.graph.get("routing"),
    }


def _print_report(rep: dict[str, Any], console: Console) -> None:
    table = Table(title=f"{rep['model']['name']} {rep['phase']} - per device, one layer, "
                        f"one iteration", caption=rep["what"], caption_justify="left")
    for col, just in (("op", "left"), ("kind", "left"), ("count", "right"), ("shape", "left"),
                      ("FLOPs", "right"), ("read B", "right"), ("written B", "right"),
                      ("FLOP/B", "right"), ("suits", "left")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for grp in rep["groups"]:
        ai = grp["arithmetic_intensity"]
        table.add_row(grp["sub_role"], grp["kind"], str(grp["count"]), grp["shape_text"],
                      _si(grp["flops"]), _si(grp["bytes_read"]), _si(grp["bytes_written"]),
                      "-" if ai is None else f"{ai:.3g}", grp["engine"])
    t = rep["totals"]
    table.add_section()
    table.add_row("total", "", str(t["ops"]), f"{t['tokens']} tokens", _si(t["flops"]),
                  _si(t["bytes_read"]), _si(t["bytes_written"]),
                  "-" if t["arithmetic_intensity"] is None else f"{t['arithmetic_intensity']:.3g}",
                  "")
    console.print(table)
    b = rep["batch"]
    console.print(f"batch: {b['requests']} requests, seq_len mean {b['seq_len_mean']:.1f} "
                  f"(min {b['seq_len_min']}, max {b['seq_len_max']}), "
                  f"{b['channels_used']} channels used; source: {b['source']}")
    if rep.get("routing"):
        console.print(f"experts: rows routed by the {rep['routing']} (only the experts chosen "
                      "are read)")
    console.print(f"weights read {_si(t['weight_bytes'], 'B')}, KV cache read+written "
                  f"{_si(t['kv_bytes'], 'B')}, all-reduce traffic {_si(t['comm_bytes'], 'B')} "
                  f"sent per device (per layer, per iteration)")
    for eng, e in sorted(rep["by_engine"].items(), key=lambda kv: -kv[1]["flops"]):
        share = e["flops"] / t["flops"] if t["flops"] else 0.0
        console.print(f"  {eng:15s} {e['ops']:6d} ops  {_si(e['flops'], 'FLOP'):>12s} "
                      f"({share:6.1%})  {_si(e['bytes'], 'B'):>10s}")


def register(app: typer.Typer) -> None:
    """Add the ``workload`` command group to ``app``."""
    grp = typer.Typer(help="Workloads: models, request batches and their operator graphs.",
                      no_args_is_help=True)

    @grp.command("show")
    def show_cmd(
        model: str = typer.Option("gpt3-7b", "--model", help="built-in model name or a Hugging "
                                  "Face config.json"),
        phase: str = typer.Option("decode", "--phase", help="prefill or decode"),
        requests: Path | None = typer.Option(
            None, "--requests", help="request file: .csv decode snapshot (seq_len,ch_idx) used "
            "as is; .tsv length table or .json ShareGPT conversations drawn from"),
        batch: int | None = typer.Option(
            None, "--batch", min=1, help="requests in the batch (default: 256, or every request "
            "of a --requests snapshot)"),
        dataset: str = typer.Option(None, "--dataset", help=(
            "built-in length distribution: sharegpt or alpaca (default sharegpt; not with "
            "--requests)")),
        tp: int | None = typer.Option(None, "--tp", min=1,
                                      help="tensor-parallel degree (default: the model's)"),
        seed: int = typer.Option(0, "--seed", min=0, help="seed of sampling and warm-up"),
        channels: int = typer.Option(None, "--channels", min=1, help=(
            "decode warm-up: PIM channels of the KV placement (default 32)")),
        policy: str = typer.Option(None, "--policy", help=(
            "decode warm-up: channel assignment min_load (default) or round_robin")),
        json_path: Path | None = typer.Option(None, "--json",
                                              help="also write the full report as JSON here"),
    ) -> None:
        """Per-operator FLOPs, bytes, arithmetic intensity and suited engine of one layer."""
        if phase not in ("prefill", "decode"):
            raise WorkloadError(f"--phase {phase!r} not one of ['prefill', 'decode']")
        from archsim.cli.boundary import check_output_file, check_workload_flags

        check_workload_flags(seed=seed, requests=requests, dataset=dataset)
        placing = [f for f, v in (("--channels", channels), ("--policy", policy)) if v is not None]
        if placing and (phase == "prefill" or (requests is not None
                                               and requests.suffix.lower() == ".csv")):
            raise WorkloadError(f"{'/'.join(placing)} place the KV cache of a warmed-up decode "
                                "batch; a prefill batch or a .csv snapshot (which has its "
                                "channels) does not use them")
        check_output_file(json_path, "--json")
        spec = load_hf_config(model) if model.endswith(".json") or Path(model).is_dir() \
            else get_model(model)
        the_tp = spec.tensor_parallel if tp is None else tp
        spec.check_tensor_parallel(the_tp)
        the_batch = _make_batch(spec, phase, requests, batch, dataset or "sharegpt", seed,
                                channels or 32, policy or "min_load")
        rep = workload_report(spec, phase, the_batch, the_tp)
        out = sys.stdout
        console = Console(file=out, width=None if out.isatty() else 160)
        _print_report(rep, console)
        if json_path is not None:
            try:
                json_path.write_text(json.dumps(rep, indent=1) + "\n", encoding="utf-8")
            except OSError as exc:
                raise WorkloadError(f"--json {json_path}: cannot write ({exc.strerror})") from None
            console.print(f"wrote {json_path}")

    @grp.command("models")
    def models_cmd() -> None:
        """List the built-in models with their size and reference parallelism."""
        for name in list_models():
            m = get_model(name)
            typer.echo(f"{name:11s} {m.param_count() / 1e9:8.3f}B params  d={m.d_model:<6d} "
                       f"heads={m.n_heads}/{m.n_kv_heads:<3d} layers={m.n_layers:<3d} "
                       f"{m.norm}/{m.activation}/{m.positional}  TP{m.tensor_parallel} "
                       f"PP{m.pipeline_parallel}")

    app.add_typer(grp, name="workload")
