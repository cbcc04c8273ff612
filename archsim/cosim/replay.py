"""Real stimulus for the RTL: command logs of the simulator and operands of a functional run.

* **Channel command logs** (block ``pim_channel_replay``): :func:`channel_log` runs one
  compiled window of a model on the cycle-level system (:func:`archsim.system.run_window`
  with the memory command log kept), takes the log of one channel and stores it with a header
  naming the configuration it belongs to (:func:`legality_fields`: the organisation, every
  timing, the row-buffer mode, the refresh policy, the PIM timings) under the build
  directory, keyed by the configuration, the workload and the source code of the simulator
  (a changed scheduler gives a new log, never a stale one). :func:`load_channel_log` reads
  such a file, or a command-log CSV (:mod:`archsim.memory.cmdlog`), and refuses a log of
  another configuration with a one-line error naming what differs.
* **COMP operand traces** (block ``pim_mac_fp_replay``): :func:`comp_trace` runs the golden
  validation of a tiny model (:func:`archsim.validation.run_validation`, functional mode) and
  records every COMP step's operands and accumulators of one channel's banks through
  :func:`archsim.functional.observe_comp_steps`, as per-bank streams.

The data are produced in the harness process, before the simulator starts; the test bench
reads the ``.npz`` file the job names. Nothing here is committed: files live under the build
directory (``rtl/sim_build/replay``).
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from archsim.cosim.common import REPO_ROOT, CosimError, file_lock

SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
"""``../shared/data`` beside the checkout (DESIGN §4), where the NeuPIMs batch snapshots live."""
LOG_FORMAT = "archsim-channel-log/1"
TRACE_FORMAT = "archsim-comp-trace/1"


@dataclass(frozen=True)
class ReplayWorkload:
    """What a replay runs: a model, a decode batch and the layers of one compiled window.

    Attributes:
        name: key of :data:`REPLAY_WORKLOADS`.
        model: a :func:`workloads.get_model` name.
        requests: size of the built-in ShareGPT-like batch (``default_batch``, seed 0), or 0
            when ``snapshot`` is given.
        snapshot: a decode-batch snapshot under ``../shared/data`` (CSV ``seq_len,ch_idx``).
        layers: the layers of the window (consecutive, from 0).
        description: for reports.
    """

    name: str
    model: str
    requests: int = 0
    snapshot: str = ""
    layers: tuple[int, ...] = (0,)
    description: str = ""


REPLAY_WORKLOADS: dict[str, ReplayWorkload] = {
    "tiny": ReplayWorkload("tiny", "tiny-gpt", requests=16, layers=(0, 1),
                           description="tiny-gpt, both layers, 16 ShareGPT-like requests"),
    "gpt3-clb0": ReplayWorkload(
        "gpt3-clb0", "gpt3-7b", snapshot="neupims/request-traces/clb/"
        "share-gpt2-bs512-ms7B-tp4-clb-0.csv", layers=(0,),
        description="GPT3-7B (TP4) layer 0 on the NeuPIMs clb-0 decode batch (512 requests)"),
}


def get_workload(name: str) -> ReplayWorkload:
    """The replay workload called ``name``. Raises CosimError listing the known ones."""
    try:
        return REPLAY_WORKLOADS[name]
    except KeyError:
        raise CosimError(f"unknown replay workload '{name}'; known: "
                         f"{', '.join(REPLAY_WORKLOADS)}") from None


def snapshot_path(wl: ReplayWorkload) -> Path:
    """Where the workload's batch snapshot lives. Raises CosimError when it is absent."""
    path = SHARED_DATA / wl.snapshot
    if not path.is_file():
        raise CosimError(f"replay workload '{wl.name}' needs the shared data file {path} "
                         "(../shared/data beside the checkout); it is not there")
    return path


def legality_fields(cfg) -> dict[str, object]:
    """Every configuration value a command's legality depends on, by dotted key: the
    channel organisation and count (``memory.org.*``), every timing (``memory.timing.*``), the
    standard, the refresh policy, the row-buffer mode and the PIM timings."""
    mem, pim = cfg.memory, cfg.pim
    out: dict[str, object] = {"memory.kind": mem.kind, "memory.refresh.mode": mem.refresh.mode,
                              "pim.row_buffer_mode": pim.row_buffer_mode}
    for section, obj in (("memory.org", mem.org), ("memory.timing", mem.timing)):
        for k, v in obj.model_dump(mode="json").items():
            out[f"{section}.{k}"] = v
    for k in ("gwrite_cycles", "readres_cycles", "gemv_pipeline_fill", "mode_switch_cycles",
              "multipliers_per_bank"):
        out[f"pim.{k}"] = getattr(pim, k)
    return out


def _source_digest() -> str:
    """Digest of the simulator's Python sources that decide a command log (everything but the
    co-simulation harness and the CLI)."""
    h = hashlib.sha256()
    for top in ("archsim", "mapping", "workloads", "isa"):
        for f in sorted((REPO_ROOT / top).rglob("*.py")):
            rel = f.relative_to(REPO_ROOT).as_posix()
            if rel.startswith(("archsim/cosim/", "archsim/cli/")):
                continue
            h.update(rel.encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def _cache_path(build_root: Path, stem: str, cfg, *parts) -> Path:
    """Where a replay stimulus made from ``cfg`` and ``parts`` is cached: under
    ``build_root/replay``, named by a digest of the machine, the parts and the simulator's
    sources (a changed simulator never reuses an old stimulus)."""
    key = hashlib.sha256(json.dumps([cfg.model_dump(mode="json"), *parts, _source_digest()],
                                    sort_keys=True, default=str).encode()).hexdigest()[:16]
    return Path(build_root) / "replay" / f"{stem}-{key}.npz"


def _atomic_savez(path: Path, **arrays) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def _header(arr) -> dict:
    return json.loads(str(arr[()]))


# ---------------------------------------------------------------------------- channel logs
def channel_log(cfg, workload: str, build_root: Path, channel: int | None = None,
                label: str = "") -> Path:
    """The command log of one channel for ``workload`` on ``cfg`` (made once, then cached).

    Runs :func:`archsim.system.run_window` over the workload's layers with the command log
    kept and takes channel ``channel`` (default: the channel with the most commands, the
    lowest index on a tie). Returns the ``.npz`` file: ``log`` int64 ``[n, 8]`` (cycle,
    channel, rank, bank group, bank, command index into
    :data:`archsim.memory.spec.COMMANDS`, row, column) in issue order, ``header`` (JSON: the
    format, :func:`legality_fields`, the workload, the channel, counts).

    Raises CosimError for an unknown workload, missing shared data or a channel outside the
    configuration; mapping/simulation errors of the run propagate.
    """
    wl = get_workload(workload)
    chans = cfg.memory.org.channels
    if channel is not None and not 0 <= channel < chans:
        raise CosimError(f"--channel {channel} is outside memory.org.channels={chans} "
                         f"(allowed 0..{chans - 1})")
    fields = legality_fields(cfg)
    path = _cache_path(build_root, f"log-{wl.name}", cfg, wl.__dict__, channel)
    with file_lock(path.with_name(f"{path.name}.lock")):
        if path.exists():
            return path
        from archsim.system import run_window
        from workloads import default_batch, get_model, load_decode_snapshot

        model = get_model(wl.model)
        batch = (load_decode_snapshot(snapshot_path(wl)) if wl.snapshot
                 else default_batch(model, wl.requests, "sharegpt", seed=0))
        win = run_window(cfg, model, batch, list(wl.layers), keep_log=True)
        log = win.memory.command_log_array()
        counts = np.bincount(log[:, 1], minlength=chans)
        ch = int(np.argmax(counts)) if channel is None else int(channel)
        rows = log[log[:, 1] == ch]
        rows = rows[np.argsort(rows[:, 0], kind="stable")]
        header = {"format": LOG_FORMAT, "source": f"run_window({label or 'config'}, "
                  f"{wl.description})", "workload": wl.name, "channel": ch,
                  "commands": int(len(rows)), "fields": fields}
        _atomic_savez(path, log=rows.astype(np.int64), header=np.array(json.dumps(header)))
    return path


def _diff_message(path, recorded: dict, fields: dict) -> str | None:
    diffs = [k for k in sorted(set(recorded) | set(fields)) if recorded.get(k) != fields.get(k)]
    if not diffs:
        return None
    k = diffs[0]
    more = f" (and {len(diffs) - 1} more: {', '.join(diffs[1:4])}{', ...' if len(diffs) > 4 else ''})" \
        if len(diffs) > 1 else ""
    return (f"{path}: command log of another configuration: it was recorded with {k}="
            f"{recorded.get(k)}, this configuration has {k}={fields.get(k)}{more}")


def validate_channel_records(rows: np.ndarray, cfg, where: str) -> None:
    """Refuse records that cannot belong to one channel of ``cfg`` (one line naming the first
    bad record, the field and the configuration key with its allowed range): command index,
    rank / bank group / bank / row for the commands that name them, a PIM_GEMV's k, cycles
    (non-negative, at most one command per cycle, in order) and one channel only."""
    from archsim.cosim.channel import max_gemv_k
    from archsim.memory.spec import COMMANDS, SCOPE

    org = cfg.memory.org
    if rows.ndim != 2 or rows.shape[1] != 8:
        raise CosimError(f"{where}: a command log has 8 columns per record, got shape "
                         f"{rows.shape}")
    if len(rows) == 0:
        raise CosimError(f"{where}: the command log is empty")
    bad_cmd = np.nonzero((rows[:, 5] < 0) | (rows[:, 5] >= len(COMMANDS)))[0]
    if bad_cmd.size:
        i = int(bad_cmd[0])
        raise CosimError(f"{where}: record {i} (cycle {rows[i, 0]}): command index "
                         f"{rows[i, 5]} is not one of 0..{len(COMMANDS) - 1} "
                         f"({', '.join(COMMANDS)})")
    if len(np.unique(rows[:, 1])) != 1:
        raise CosimError(f"{where}: records of channels {sorted(set(rows[:, 1].tolist()))[:5]}; "
                         "a replay takes the log of one channel")
    ch = int(rows[0, 1])
    if not 0 <= ch < org.channels:
        raise CosimError(f"{where}: channel {ch} is outside memory.org.channels="
                         f"{org.channels} (allowed 0..{org.channels - 1})")
    scope = np.array([SCOPE[c] for c in COMMANDS])[rows[:, 5]]
    names = np.array(COMMANDS)[rows[:, 5]]
    kmax = max_gemv_k(cfg)
    checks = [   # (field, column, what bounds it, allowed range, records that name it)
        ("rank", 2, f"memory.org.ranks={org.ranks}", (0, org.ranks - 1), scope != "channel"),
        ("bank group", 3, f"memory.org.bank_groups={org.bank_groups}",
         (0, org.bank_groups - 1), (scope == "bank") | (scope == "bankgroup")),
        ("bank", 4, f"memory.org.banks_per_group={org.banks_per_group}",
         (0, org.banks_per_group - 1), scope == "bank"),
        ("row", 6, f"memory.org.rows={org.rows}", (0, org.rows - 1),
         np.isin(names, ("ACT", "RD", "WR", "RDA", "WRA", "G_ACT"))),
        ("k (COMP steps)", 7, f"the COMP steps of one row, memory.org.page_size_bytes / (2 x "
         f"pim.multipliers_per_bank) = {kmax}", (1, kmax), names == "PIM_GEMV"),
    ]
    for label, col, bound, (lo, hi), named in checks:
        bad = np.nonzero(named & ((rows[:, col] < lo) | (rows[:, col] > hi)))[0]
        if bad.size:
            i = int(bad[0])
            raise CosimError(f"{where}: record {i} (cycle {rows[i, 0]}, {names[i]}): {label} "
                             f"{rows[i, col]} is outside {bound} (allowed {lo}..{hi}): a log "
                             "of another configuration")
    d = np.diff(rows[:, 0])
    if rows[0, 0] < 0 or (d <= 0).any():
        i = 0 if rows[0, 0] < 0 else int(np.nonzero(d <= 0)[0][0]) + 1
        raise CosimError(f"{where}: record {i} (cycle {rows[i, 0]}): cycles must be >= 0 and "
                         "strictly increasing (one command per cycle on a channel's bus)")


def load_channel_log(path: str | Path, cfg, channel: int | None = None
                     ) -> tuple[np.ndarray, dict]:
    """Read a channel command log for replay on ``cfg``: the ``.npz`` of :func:`channel_log`
    or a CSV of :mod:`archsim.memory.cmdlog` (every channel; ``channel`` picks one, default
    the one with the most commands). Returns ``(rows int64 [n, 8], header)``.

    Raises CosimError (one line) for a missing or unreadable file, a log recorded for another
    configuration (naming the first differing key and both values), or records that do not
    fit the configuration (:func:`validate_channel_records`).
    """
    from archsim.errors import ArchsimError
    from archsim.memory.spec import CMD_INDEX

    p = Path(path)
    if not p.is_file():
        raise CosimError(f"--log {p}: no such file")
    fields = legality_fields(cfg)
    if p.suffix == ".npz":
        try:
            with np.load(p) as z:
                rows, header = z["log"].astype(np.int64), _header(z["header"])
        except (OSError, KeyError, ValueError) as exc:
            raise CosimError(f"{p}: not a channel log of archsim cosim ({exc})") from None
        if header.get("format") != LOG_FORMAT:
            raise CosimError(f"{p}: format {header.get('format')!r}, expected {LOG_FORMAT}")
        msg = _diff_message(p, header.get("fields", {}), fields)
        if msg:
            raise CosimError(msg)
    else:
        from archsim.memory.cmdlog import read_log_csv

        try:
            recs = read_log_csv(p)
        except ArchsimError as exc:
            raise CosimError(str(exc)) from None
        unknown = next(((i, r) for i, r in enumerate(recs) if r.command not in CMD_INDEX), None)
        if unknown is not None:
            i, r = unknown
            raise CosimError(f"{p}: record {i} (cycle {r.cycle}): unknown command "
                             f"'{r.command}'; known: {', '.join(CMD_INDEX)}")
        allr = np.array([(r.cycle, r.channel, r.rank, r.bankgroup, r.bank, CMD_INDEX[r.command],
                          r.row, r.column) for r in recs], dtype=np.int64).reshape(-1, 8)
        chans = cfg.memory.org.channels
        if len(allr) and (allr[:, 1].max() >= chans or allr[:, 1].min() < 0):
            i = int(np.nonzero((allr[:, 1] >= chans) | (allr[:, 1] < 0))[0][0])
            raise CosimError(f"{p}: record {i} (cycle {allr[i, 0]}): channel {allr[i, 1]} is "
                             f"outside memory.org.channels={chans} (allowed 0..{chans - 1}): "
                             "a log of another configuration")
        if channel is None and len(allr):
            channel = int(np.argmax(np.bincount(allr[:, 1], minlength=chans)))
        rows = allr[allr[:, 1] == channel] if len(allr) else allr
        if len(rows) == 0:
            raise CosimError(f"{p}: no command of channel {channel}")
        rows = rows[np.argsort(rows[:, 0], kind="stable")]
        header = {"format": LOG_FORMAT, "source": str(p), "workload": "", "channel": channel,
                  "commands": int(len(rows)), "fields": fields}
    if channel is not None and len(rows) and int(rows[0, 1]) != channel:
        raise CosimError(f"{p}: the log holds channel {int(rows[0, 1])}, not --channel "
                         f"{channel}")
    validate_channel_records(rows, cfg, str(p))
    return rows, header


def write_channel_log(rows: np.ndarray, header: dict, path: Path) -> Path:
    """Store a validated channel log (as :func:`channel_log` does) for the test bench."""
    _atomic_savez(Path(path), log=np.asarray(rows, np.int64),
                  header=np.array(json.dumps(header)))
    return Path(path)


def read_channel_log(path: str | Path) -> tuple[np.ndarray, dict]:
    """The ``(rows, header)`` of a stored channel log, unchecked (the test bench's reader:
    the harness has validated the file against the configuration)."""
    with np.load(path) as z:
        return z["log"].astype(np.int64), _header(z["header"])


# ---------------------------------------------------------------------------- COMP traces
def comp_trace(cfg, dtype: str, build_root: Path, model: str = "tiny-gpt", requests: int = 3,
               steps: int = 1, seed: int = 0) -> Path:
    """Operands and accumulators of every COMP step of channel 0 in the golden validation of
    ``model`` (``requests`` requests, ``steps`` decode steps, weights in ``dtype``) on
    ``cfg``, made once and cached. Returns the ``.npz``:

    * ``bank``, ``gbuf``: uint16 ``[n, lanes]`` storage bits of each step's row burst and
      global-buffer elements;
    * ``acc_in``, ``acc_out``: uint32 ``[n]`` binary32 bits of the bank's accumulator before
      and after the step;
    * ``first``: bool ``[n]``: the step starts a dot product (the accumulator before it is
      +0.0: after READRES, or a sum that is exactly +0.0, where starting from +0.0 is the
      same);
    * ``stream``: int ``[n]`` the flat bank; steps are grouped by bank (a bank's steps in
      order), so one ``pim_mac_fp`` replays them back to back;
    * ``header``: JSON (dtype, model, counts, whether the validation passed).

    Raises CosimError for a dtype the datapath does not take (fp16, bf16), a run that makes
    no COMP step, or an inconsistent trace (an accumulator not continuing its bank's
    previous step: a simulator bug).
    """
    if dtype not in ("fp16", "bf16"):
        raise CosimError(f"a COMP trace for pim_mac_fp needs dtype fp16 or bf16, got {dtype!r}")
    path = _cache_path(build_root, f"comp-{model}-{dtype}", cfg, dtype, model, requests, steps,
                       seed)
    with file_lock(path.with_name(f"{path.name}.lock")):
        if path.exists():
            return path
        from archsim import functional
        from archsim.validation import default_prompt_lens, run_validation
        from archsim.validation.reference import ModelReference
        from workloads.models import get_model

        spec = get_model(model)
        rec: list = []

        def observe(ch, banks, a0, chunk, g, a1):
            if ch == 0:
                rec.append((banks.copy(), a0.copy(), chunk.copy(), g.copy(), a1.copy()))

        with functional.observe_comp_steps(observe):
            report = run_validation(ModelReference(spec, seed, dtype), cfg, system=cfg.name,
                                    prompt_lens=default_prompt_lens(
                                        requests, seed, spec.max_seq_len - steps),
                                    steps=steps, seed=seed)
        if not rec:
            raise CosimError(f"the validation of {model} on {cfg.name} made no COMP step on "
                             "channel 0: nothing to replay")
        per_bank: dict[int, list] = {}
        for banks, a0, chunk, g, a1 in rec:
            for j, b in enumerate(banks.tolist()):
                per_bank.setdefault(b, []).append((a0[j], chunk[j], g, a1[j]))
        bank_bits, gbuf_bits, acc_in, acc_out, first, stream = [], [], [], [], [], []

        def bits16(x):
            s = functional.to_storage(np.asarray(x, np.float32), dtype)
            return np.asarray(s).view(np.uint16)

        for b in sorted(per_bank):
            prev = None
            for a0, chunk, g, a1 in per_bank[b]:
                i0 = int(np.float32(a0).view(np.uint32))
                if i0 != 0 and i0 != prev:
                    raise CosimError(f"COMP trace: bank {b}'s accumulator {i0:#010x} does not "
                                     f"continue its previous step ({prev}): a simulator bug")
                bank_bits.append(bits16(chunk))
                gbuf_bits.append(bits16(g))
                acc_in.append(i0)
                prev = int(np.float32(a1).view(np.uint32))
                acc_out.append(prev)
                first.append(i0 == 0)
                stream.append(b)
        header = {"format": TRACE_FORMAT, "dtype": dtype, "model": model, "config": cfg.name,
                  "requests": requests, "steps": steps, "seed": seed, "channel": 0,
                  "banks": len(per_bank), "comp_steps": len(acc_in),
                  "validation_passed": bool(report.passed)}
        _atomic_savez(path, bank=np.array(bank_bits, np.uint16), gbuf=np.array(gbuf_bits, np.uint16),
                      acc_in=np.array(acc_in, np.uint32), acc_out=np.array(acc_out, np.uint32),
                      first=np.array(first, bool), stream=np.array(stream, np.int64),
                      header=np.array(json.dumps(header)))
    return path


def read_comp_trace(path: str | Path) -> dict:
    """The arrays and header of a stored COMP trace (see :func:`comp_trace`)."""
    with np.load(path) as z:
        out = {k: z[k] for k in ("bank", "gbuf", "acc_in", "acc_out", "first", "stream")}
        out["header"] = _header(z["header"])
    return out


__all__ = ["ReplayWorkload", "REPLAY_WORKLOADS", "get_workload", "channel_log",
           "load_channel_log", "write_channel_log", "read_channel_log",
           "validate_channel_records", "legality_fields", "comp_trace", "read_comp_trace",
           "SHARED_DATA"]
