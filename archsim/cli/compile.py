"""``archsim compile``: run the mapping compiler and write what the machine would run.

Output directory (``-o DIR``):

* ``program.bin`` — the binary program container (:meth:`isa.program.Program.to_bytes`, with
  its debug table);
* ``manifest.json`` — the resolved machine, model, batch and compile facts
  (:mod:`archsim.system.program_dir`): ``archsim run --program DIR`` simulates the directory;
* ``program.s`` — the whole program as assembly (``archsim asm`` of it gives the same program);
* ``asm/<stream>.s`` — one file per engine stream, each instruction annotated with the
  operator it implements, its schedule stage and the HBM tensor it addresses;
* ``graph.graphml`` and ``graph.dot`` — the operator graph with each node's engine and kernel;
* ``summary.json`` — instruction counts by opcode, bytes moved and MACs per engine, KV footprint
  per channel, KV placement (``fixed``/``rotate``/``spill`` and the requests spilled), the
  scratchpad's ``buffer_plan`` (attention key block, GEMM row block, weight ring, bytes:
  :class:`mapping.bufplan.BufferPlan`), sub-batch assignment, stages, collectives, and
  ``latency_lower_bound``: a bound from the counts and the machine's peak rates (not a
  simulation; see :func:`lower_bound`).
"""
from __future__ import annotations

import bisect
import json
import time
from collections import defaultdict
from enum import Enum
from pathlib import Path
from typing import Any

import networkx as nx
import typer

from archsim.config import MachineConfig, load_config
from archsim.errors import ArchsimError

SET_HELP = "Override a machine key, e.g. --set system.sub_batches=3 (repeatable, YAML value)."


def lower_bound(compiled: Any, cfg: MachineConfig) -> dict[str, Any]:
    """A lower bound of the program's latency from instruction counts and peak rates.

    Each engine kind needs at least its work divided by its peak rate; engines may overlap
    perfectly, so the program needs at least the largest of these (NPU clock cycles):

    * systolic arrays: SA MACs / (arrays x H x W) (one MAC per PE per cycle);
    * DMA: bytes moved / the device's peak external bandwidth (memory cycles converted);
    * PIM, per channel: COMP steps x max(BL/2, tCCD_S) + GWRITEs x gwrite_cycles (memory
      cycles, the reference's per-command costs, without activation or refresh), the busiest
      channel counts;
    * vector units: elements processed / (units x lanes).

    Ignored (so the bound stays a bound): pipeline fill, DRAM row misses and refresh, semaphore
    latency, dependencies between engines. Returns ``{"cycles", "seconds", "by_engine"}``.
    """
    npu, mem, pim = cfg.npu, cfg.memory, cfg.pim
    es = {"fp16": 2, "bf16": 2, "fp32": 4}
    macs = compiled.macs_by_engine()
    sa = macs.get("sa", 0) / (npu.n_arrays * npu.array_height * npu.array_width)
    dma_bytes = 0
    vu_elems = 0
    pim_mem_cycles: dict[str, float] = defaultdict(float)
    cstep = max(mem.burst_cycles, mem.timing.tCCD_S)
    for s, instrs in compiled.program.streams.items():
        for ins in instrs:
            m = ins.mnemonic
            if m in ("DMA_LOAD", "DMA_STORE"):
                dma_bytes += ins["rows"] * ins["cols"] * es[ins["dtype"]]
            elif m == "PIM_GEMV" or m == "COMP":
                pim_mem_cycles[s] += ins["n_comps"] * cstep
            elif m == "GWRITE":
                pim_mem_cycles[s] += pim.gwrite_cycles
            elif m.startswith("VU_"):
                if m == "VU_DOT":
                    vu_elems += ins["rows"] * ins["cols"]
                else:
                    vu_elems += ins["rows"] * ins["cols"]
    bw = mem.peak_bandwidth_bytes_per_cycle_per_channel * mem.org.channels  # per memory cycle
    by = {
        "sa": sa,
        "dma": cfg.mem_to_npu_cycles(dma_bytes / bw),
        "pim": cfg.mem_to_npu_cycles(max(pim_mem_cycles.values(), default=0.0)),
        "vu": vu_elems / (npu.vector.count * npu.vector.lanes),
    }
    cyc = max(by.values())
    return {"cycles": cyc, "seconds": cyc / (npu.freq_mhz * 1e6), "clock": "NPU",
            "by_engine": by, "binding_engine": max(by, key=by.get),
            "note": "lower bound from counts and peak rates, not a simulation"}


def _graph_for_files(g: nx.DiGraph, placement: dict) -> nx.DiGraph:
    out = nx.DiGraph()
    for n, a in g.nodes(data=True):
        attrs = {}
        for k, v in a.items():
            if isinstance(v, Enum):
                v = str(v.value)
            elif isinstance(v, dict):
                v = ",".join(f"{kk}={vv}" for kk, vv in v.items())
            elif v is None:
                v = ""
            elif not isinstance(v, (int, float, str, bool)):
                v = str(getattr(v, "value", v))
            attrs[k] = v
        p = placement.get(n)
        attrs["engine"] = p.engine if p else ""
        attrs["kernel"] = p.kernel if p else ""
        out.add_node(n, **attrs)
    for u, v, a in g.edges(data=True):
        out.add_edge(u, v, **{k: (x if isinstance(x, (int, float, str)) else str(x))
                              for k, x in a.items()})
    return out


_COLORS = {"sa": "lightblue", "vu": "palegreen", "pim": "orange", "dma": "lightgrey",
           "link": "plum"}


def write_dot(g: nx.DiGraph, path: Path) -> None:
    """Write ``g`` (with ``engine``/``kind`` node attributes) as Graphviz DOT, colored by
    engine."""
    def q(s: str) -> str:
        return '"' + str(s).replace('"', '\\"') + '"'
    lines = ["digraph ops {", "  rankdir=TB;", "  node [shape=box, style=filled];"]
    for n, a in g.nodes(data=True):
        label = f"{n}\\n{a.get('kind', '')} on {a.get('engine', '')}"
        color = _COLORS.get(a.get("engine"), "white")
        lines.append(f"  {q(n)} [label={q(label)}, fillcolor={color}];")
    for u, v, a in g.edges(data=True):
        lines.append(f"  {q(u)} -> {q(v)} [label={q(a.get('tensor', ''))}];")
    lines.append("}")
    path.write_text("\n".join(lines) + "\n")


def write_outputs(compiled: Any, out: Path, extra: dict[str, Any]) -> dict[str, Any]:
    """Write the program, assembly, graph and summary of ``compiled`` into ``out``.

    Returns the summary dict (also written as ``summary.json``).
    """
    from isa.asm import format_instruction

    out.mkdir(parents=True, exist_ok=True)
    prog = compiled.program
    (out / "program.bin").write_bytes(prog.to_bytes())
    data = sorted(prog.data, key=lambda d: d.addr)
    starts = [d.addr for d in data]

    def sym(addr: int) -> str:
        i = bisect.bisect_right(starts, addr) - 1
        if i >= 0 and addr < data[i].end:
            off = addr - data[i].addr
            return data[i].name if off == 0 else f"{data[i].name}+{off:#x}"
        return ""

    head = ["; archsim ISA program written by 'archsim compile'"]
    if prog.spad_size_bytes:
        head.append(f".spad {prog.spad_size_bytes}")
    head.append(".data")
    for d in prog.data:
        head.append(f"    {d.name} addr={d.addr:#x} size={d.size_bytes} "
                    f"shape={'x'.join(map(str, d.shape))} dtype={d.dtype} kind={d.kind}")
    asm_dir = out / "asm"
    asm_dir.mkdir(exist_ok=True)
    with open(out / "program.s", "w") as whole:
        whole.write("\n".join(head) + "\n")
        for name, instrs in prog.streams.items():
            meta = compiled.meta[name]
            lines = [f".stream {name}"]
            ann = [f"; stream {name}: {len(instrs)} instructions", f".stream {name}"]
            for i, ins in enumerate(instrs):
                text = "    " + format_instruction(ins)
                lines.append(text)
                notes = []
                k = int(meta.op[i])
                if k >= 0:
                    notes.append(compiled.ops[k])
                st = int(meta.stage[i])
                if st >= 0:
                    notes.append(f"stage {compiled.stages[st]}")
                if ins.spec.field_names and "hbm" in ins.spec.field_names:
                    s = sym(ins["hbm"])
                    if s:
                        notes.append(s)
                ann.append(f"{text:<100s} ; {' | '.join(notes)}" if notes else text)
            whole.write("\n".join(lines) + "\n")
            (asm_dir / f"{name}.s").write_text("\n".join(ann) + "\n")
    g = _graph_for_files(compiled.graph, compiled.placement)
    nx.write_graphml(g, out / "graph.graphml")
    write_dot(g, out / "graph.dot")
    summary = compiled.summary()
    summary["latency_lower_bound"] = lower_bound(compiled, compiled.cfg)
    summary.update(extra)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def compile_command(model: str = "gpt3-7b", requests: str | None = None,
                    batch: int | None = None, dataset: str | None = None,
                    system: str = "neupims", set_: list[str] | None = None, layers: str = "1",
                    seed: int = 0, keep_channels: bool = False, verify: bool = False,
                    out: str = "compiled", phase: str = "decode") -> dict[str, Any]:
    """What ``archsim compile`` does (also callable from Python); returns the summary.

    ``system`` is a system name (``neupims``, ``npu-pim``, ``npu``), a preset or a YAML file,
    as for ``archsim run``; ``dataset`` None is ``sharegpt``. Every flag and the output
    directory are checked before compiling. With ``verify`` the summary's ``verify`` holds the
    verdict (``passed``), the violations found, and ``seconds`` of the check.

    Raises:
        ArchsimError / ConfigError / WorkloadError / MappingError: bad input (one line at the
            CLI).
    """
    from archsim.cli.boundary import check_output_dir, check_workload_flags
    from archsim.serving import resolve_system
    from mapping import CompileOptions, compile_layer, compile_model
    from workloads.models import get_model, load_hf_config
    from workloads.requests import (BUILTIN_DATASETS, Batch, default_batch, load_request_file,
                                    warmup_decode_snapshot)

    if layers not in ("1", "all", "window"):
        raise ArchsimError(f"--layers {layers!r}: expected 1, window or all")
    if phase not in ("decode", "prefill"):
        raise ArchsimError(f"--phase {phase!r}: expected decode or prefill")
    check_workload_flags(seed=seed, requests=requests, dataset=dataset,
                         keep_channels=keep_channels)
    check_output_dir(out, "-o")
    _, cfg = resolve_system(system, list(set_ or []))
    spec = load_hf_config(model) if model.endswith(".json") or Path(model).is_dir() \
        else get_model(model)
    C = cfg.memory.org.channels
    if requests is not None:
        loaded = load_request_file(requests)
        if isinstance(loaded, Batch):
            b = loaded if batch is None or batch >= len(loaded) else Batch(
                loaded.requests[:batch], f"{loaded.source} (first {batch})")
        else:
            b = warmup_decode_snapshot(loaded, batch or 256, spec.max_seq_len, seed,
                                       n_channels=C, policy=cfg.system.channel_policy)
    else:
        dataset = dataset or "sharegpt"
        if dataset not in BUILTIN_DATASETS:
            raise ArchsimError(f"unknown dataset {dataset!r}; valid datasets: "
                               f"{', '.join(BUILTIN_DATASETS)} (or --requests FILE)")
        b = default_batch(spec, batch or 256, dataset, seed, n_channels=C,
                          policy=cfg.system.channel_policy)
    opts = CompileOptions(channels="keep" if keep_channels else "policy")
    t0 = time.perf_counter()
    if layers == "1":
        cp = compile_layer(spec, b, cfg, phase, 0, opts)
    elif layers == "window":                 # the layers `archsim run` simulates
        from archsim.config import parallel_degrees
        from archsim.system.core import DEFAULT_WINDOW
        from mapping import compile_layers
        per = spec.n_layers // parallel_degrees(cfg, spec)[1]
        cp = compile_layers(spec, b, cfg, phase, list(range(min(DEFAULT_WINDOW, per))), opts)
    else:
        cp = compile_model(spec, b, cfg, phase, opts)
    secs = time.perf_counter() - t0
    extra: dict[str, Any] = {"compile_seconds": round(secs, 3), "batch_source": b.source,
                             "seq_lens": [int(x) for x in cp.batch.seq_lens]}
    if verify:
        from mapping.verify import check_graph_dependencies, find_races, happens_before
        t1 = time.perf_counter()
        hb = happens_before(cp.program)
        bad = check_graph_dependencies(cp, hb)
        small = cp.program.n_instructions < VERIFY_RACES_MAX_INSTRUCTIONS
        races = find_races(cp.program, cfg, hb) if small else None
        extra["verify"] = {"passed": not bad and not races, "dependency_violations": bad[:20],
                           "n_dependency_violations": len(bad), "races": races,
                           "races_checked": small,
                           "seconds": round(time.perf_counter() - t1, 3)}
    summary = write_outputs(cp, Path(out), extra)
    from archsim.system.program_dir import write_program_dir
    write_program_dir(out, cp, source=b.source)          # manifest.json: run --program DIR
    return summary


#: Programs up to this many instructions are also checked for data races by ``--verify``
#: (the check compares the vector clocks of conflicting accesses; larger programs take long).
VERIFY_RACES_MAX_INSTRUCTIONS = 200_000


def register(app: typer.Typer) -> None:
    """Add the ``compile`` command to ``app``."""

    @app.command("compile")
    def compile_cmd(
        model: str = typer.Option("gpt3-7b", "--model", help="built-in model or config.json"),
        requests: str = typer.Option(None, "--requests", help=(
            "decode snapshot CSV (seq_len,ch_idx) or a length table/ShareGPT JSON to warm up")),
        batch: int = typer.Option(None, "--batch", min=1, help="requests (default 256)"),
        dataset: str = typer.Option(None, "--dataset", help="sharegpt | alpaca (default "
                                    "sharegpt; not with --requests)"),
        system: str = typer.Option("neupims", "--system", help=(
            "neupims | npu-pim | npu (presets neupims, npu-pim-blocked, npu-only), another "
            "preset name, or a YAML config file")),
        set_: list[str] = typer.Option([], "--set", help=SET_HELP),
        layers: str = typer.Option("1", "--layers", help=(
            "1 (layer 0), window (the layers `archsim run` simulates; `archsim run --program "
            "DIR` then gives its cycles) or all (the device's pipeline stage)")),
        seed: int = typer.Option(0, "--seed", help="seed of the built-in batch (>= 0)"),
        keep_channels: bool = typer.Option(False, "--keep-channels", help=(
            "keep the request file's channels instead of system.channel_policy")),
        verify: bool = typer.Option(False, "--verify", help=(
            "check every graph dependency (and, for small programs, data races)")),
        phase: str = typer.Option("decode", "--phase", help="decode (one token per request) "
                                                            "or prefill (the whole prompts)"),
        out: str = typer.Option(..., "-o", "--out", help="output directory (created; files "
                                "in it are replaced)"),
    ) -> None:
        """Compile one iteration to per-engine ISA programs and write them with the operator
        graph and a summary (per device; lower-bound latency in NPU cycles)."""
        t0 = time.perf_counter()
        s = compile_command(model, requests, batch, dataset, system, set_, layers, seed,
                            keep_channels, verify, out, phase)
        wall = time.perf_counter() - t0
        lb = s["latency_lower_bound"]
        typer.echo(f"compiled {s['model']} ({ {'1': 'layer 0', 'window': 'the run window'}.get(layers, 'all layers')}, "
                   f"{s['requests']} requests, {s['system']}): "
                   f"{s['instructions']} instructions in {len(s['instructions_per_stream'])} "
                   f"streams, {s['macs_total']} MACs; lower bound {lb['cycles']:.0f} NPU cycles "
                   f"per device ({lb['binding_engine']}-bound) -> {out}/")
        v = s.get("verify")
        timing = f"compile {s['compile_seconds']:.2f} s"
        if v is not None:
            timing += f", verification {v['seconds']:.2f} s"
            races = ("no data race" if v["races_checked"] and not v["races"] else
                     f"{len(v['races'])} data race(s)" if v["races_checked"] else
                     f"data races not checked (more than {VERIFY_RACES_MAX_INSTRUCTIONS:,} "
                     "instructions)")
            deps = ("every operator-graph dependency is ordered by the program's "
                    "synchronisation" if not v["n_dependency_violations"] else
                    f"{v['n_dependency_violations']} graph dependencies are not ordered")
            typer.echo(f"verification {'PASSED' if v['passed'] else 'FAILED'}: {deps}; {races}")
            for line in (v["dependency_violations"] + (v["races"] or []))[:5]:
                typer.echo(f"  {line}")
        typer.echo(f"wall time {wall:.2f} s ({timing}, the rest building the batch and "
                   "writing the files)")
        if v is not None and not v["passed"]:
            typer.echo("verification failed: this is a bug in the compiler (mapping), not in "
                       "the input; the program is written for inspection", err=True)
            raise typer.Exit(1)
