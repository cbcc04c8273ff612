"""The mapping compiler's entry points: operator graph + batch + machine -> ISA program.

:func:`compile_layer` compiles one decoder layer, :func:`compile_model` the layers of one
pipeline stage; both return a :class:`CompiledProgram` that carries the :class:`isa.Program`,
the per-instruction metadata (operator, role, stage, MACs), the sub-batch assignment, the HBM
plan (where every weight, hidden-state row and K/V element lives) and the graph it implements.

Steps (each a module of this package): channel assignment of the requests
(:func:`mapping.channels.assign_channels`: ``system.channel_policy``, or the batch's own channels
with ``CompileOptions(channels='keep')``), operator graph
(``workloads.build_layer_graph``), placement (:mod:`mapping.placement`), sub-batch split
(:mod:`mapping.subbatch`), HBM plan (:mod:`mapping.memplan`, KV geometry
:mod:`mapping.kvlayout`), stage schedule (:mod:`mapping.schedule`), instruction generation
(:mod:`mapping.codegen`) with semaphores (:mod:`mapping.builder`).

Identical layers: with the same batch, lengths and placement, :func:`compile_layer` of two layers
gives programs that differ only in HBM base addresses (weights, hidden states, KV rows) — the
simulator may time one and reuse it (``CompiledProgram.layer_key`` says when that holds).
"""
from __future__ import annotations

import gc
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np

from archsim.config import MachineConfig
from archsim.memory.addrmap import AddressMapping
from isa.program import DataAlloc, Program
from mapping.bufplan import (BufferPlan, add_qkv_staging, attention_pieces,
                             layer_attention_block, ring_depth, search_buffer_plan)
from mapping.builder import BuiltProgram, ProgramBuilder, StreamMeta
from mapping.channels import assign_channels
from mapping.codegen import PREFILL_Q_TILE, Codegen
from mapping.errors import CapacityError, MappingError, UnsupportedError
from mapping.kvlayout import PimKvLayout, StreamKvLayout, ceil_div, default_value_run
from mapping.memplan import (DTYPE_BYTES, HbmPlan, TensorPlacement, add_layer_weights,
                             check_linear_capacity, place_kv_pim, place_kv_stream, rows_slab_bytes)
from mapping.layergraph import stack_graph
from mapping.moe import local_batch, resolve_routing
from mapping.placement import Placement, place_graph
from mapping.schedule import stage_schedule
from mapping.subbatch import (SubBatchAssignment, query_tokens, split_sub_batches,
                              split_with_chunks)
from workloads.models import ModelSpec
from workloads.moe import Routing
from workloads.requests import Batch

PHASES = ("decode", "prefill", "mixed")
"""Phases the compiler emits programs for. Prefill: every request processes its ``seq_len``
prompt tokens (no earlier KV); attention runs on the systolic arrays. Mixed (chunked prefill,
Sarathi-Serve): every request processes its ``q_tokens`` (:class:`workloads.requests.Request`):
one is a decode step (attention as in decode: PIM where there is PIM), more a prompt chunk
(attention on the arrays over its cached prefix and its own causal block), all token rows in
the same GEMMs (see :func:`compile_layers`)."""


@dataclass(frozen=True)
class CompileOptions:
    """Knobs of the compiler that are not machine parameters.

    Attributes:
        channels: ``policy`` (assign with ``system.channel_policy``, default), ``keep`` (use the
            batch's channels; every request must have one). See :mod:`mapping.channels`.
        kv_placement: ``auto``, ``fixed``, ``rotate`` or ``spill`` (see
            :func:`mapping.memplan.place_kv_pim`; ``auto`` takes the first that fits).
        kv_layers: ``model`` (reserve KV of every layer of the pipeline stage, default) or
            ``compiled`` (only the compiled layers).
        reserve_tokens: extra KV room per request (tokens) for later decode steps.
        value_run: tokens per PIM value run (None: default of :mod:`mapping.kvlayout`).
        dtype: element type override (``fp16``/``bf16``/``fp32``; None: from the model).
        stage: pipeline stage whose layers the device holds (default 0).
        weight_buffers: scratchpad buffers per systolic array for weight tiles (>= 2), or None
            (default): the buffer plan's depth from the scratchpad
            (:func:`mapping.bufplan.ring_depth`: at least 5, the depth at which a
            preload-bound tile never waits on a 128 x 128 array, up to 24 with 1/8 of the
            scratchpad; 16 on the reference 32 MiB). Two is double buffering; more let the
            weight DMA run further ahead of the array, which hides memory latency when a GEMM
            is bandwidth-bound. Costs ``n_arrays x weight_buffers x H x W x dtype`` bytes of
            scratchpad (256 KiB per buffer on the reference machine); cut to 2 only when not
            even one GEMM row fits beside the ring (:func:`mapping.bufplan.search_buffer_plan`).
            History on the GPT3-7B clb-0 layer: 4 before issue 16 (543,752 cycles), 5 after
            (542,125), 16 from the scratchpad since issue 18 (524,752 on 64 MiB).
    """

    channels: str = "policy"
    kv_placement: str = "auto"
    kv_layers: str = "model"
    reserve_tokens: int = 0
    value_run: int | None = None
    dtype: str | None = None
    stage: int = 0
    weight_buffers: int | None = None

    def __post_init__(self) -> None:
        if self.channels not in ("keep", "policy"):
            raise MappingError(f"channels option '{self.channels}' not one of policy, keep")
        if self.weight_buffers is not None and self.weight_buffers < 2:
            raise MappingError(f"weight_buffers = {self.weight_buffers}: at least 2 (double "
                               "buffering) are needed")


class Context:
    """Everything the code generator needs about one compilation (batch order = positions)."""

    def __init__(self, model: ModelSpec, batch: Batch, cfg: MachineConfig, phase: str,
                 layers: list[int], tp: int, sub: SubBatchAssignment, plan: HbmPlan,
                 dtype: str, attention_on_pim: bool, value_run: int | None = None,
                 row_block: int = 1 << 30, weight_buffers: int = 5,
                 attn_block: int = 1 << 30, routing: Routing | None = None,
                 token_rows: np.ndarray | None = None, qkv_staged: bool = False,
                 chunk: np.ndarray | None = None) -> None:
        self.model, self.batch, self.cfg, self.phase = model, batch, cfg, phase
        # decode: q|k|v rows go through HBM (``dq_qkv``) instead of staying in the scratchpad
        # from the QKV GEMM to the attention (the buffer plan's choice, mapping.bufplan)
        self.qkv_staged = qkv_staged
        self.routing = routing
        # global token index (the routing's rows) of each of this device's tokens, batch order
        self.token_rows = token_rows
        self.weight_buffers = weight_buffers
        self.attn_block = attn_block
        self.layers, self.tp, self.sub, self.plan = layers, tp, sub, plan
        self.dtype = dtype
        self.attention_on_pim = attention_on_pim
        self.row_block = row_block
        org = cfg.memory.org
        self.value_run = (plan.pim_layout.run if plan.pim_layout is not None else
                          value_run or default_value_run(org.page_size_bytes // DTYPE_BYTES[dtype],
                                            cfg.pim.multipliers_per_bank,
                                            cfg.pim.gemv_pipeline_fill))
        self.n_sub = sub.n_sub_batches
        self.builder = ProgramBuilder()
        # KV tokens each request's attention covers: seq_len, min(seq_len, W) with a window
        self.seq = np.minimum(batch.seq_lens, model.sliding_window) \
            if model.sliding_window is not None else batch.seq_lens
        self.ids = batch.ids
        self.q_tokens = batch.q_tokens(phase).astype(np.int64)
        # prompt rows attended on the arrays (prefill, a chunk of mixed) vs decode steps
        self.chunk = (np.full(len(batch), phase == "prefill") if chunk is None
                      else np.asarray(chunk, dtype=bool))
        # a sub-batch's decode steps first, then its prompt rows (row order = member order)
        self._members = [sorted(map(int, sub.members(s)), key=lambda i: (bool(self.chunk[i]), i))
                         for s in range(self.n_sub)]
        self._dec = [sum(1 for i in m if not self.chunk[i]) for m in self._members]
        self._rows = [int(self.q_tokens[m].sum()) if m else 0 for m in self._members]
        self._row0 = np.cumsum([0] + self._rows)
        self._sub_of = np.asarray(sub.sub_batch, dtype=np.int64)
        self._row_in = np.zeros(len(batch), dtype=np.int64)
        for mem in self._members:
            r = 0
            for i in mem:
                self._row_in[i] = r
                r += int(self.q_tokens[i])
        # per PIM channel: the longest attention piece on it, and whether any is merged
        self._ch_max: dict[int, int] = defaultdict(int)
        self._ch_lse: dict[int, bool] = defaultdict(bool)
        for (l, i), p in plan.kv.items():
            if l in layers and p.layout == "pim":
                pieces = attention_pieces(p, attn_block)
                for seg, _, n in pieces:
                    self._ch_max[seg.channel] = max(self._ch_max[seg.channel], n)
                    self._ch_lse[seg.channel] |= len(pieces) > 1

    def rows_per_sub(self, s: int) -> int:
        """Token rows of sub-batch ``s`` (decode: its request count; prefill: its tokens)."""
        return self._rows[s]

    def dec_rows(self, s: int) -> int:
        """Decode rows of sub-batch ``s``: its first rows, one per decode step (all of a decode
        sub-batch, none of a prefill one). They stay in the scratchpad between the QKV GEMM,
        attention and the projection; prompt rows go through HBM (``pf_qkv``, ``pf_ao``)."""
        return self._dec[s]

    def is_chunk(self, i: int) -> bool:
        """Whether batch position ``i`` is a prompt (or prompt chunk) attended on the arrays."""
        return bool(self.chunk[i])

    def sub_row0(self, s: int) -> int:
        """First row of sub-batch ``s`` in the hidden-state tensors."""
        return int(self._row0[s])

    def members(self, s: int) -> list[int]:
        """Batch positions of sub-batch ``s``, in row order."""
        return self._members[s]

    def sub_of(self, i: int) -> int:
        """Sub-batch of batch position ``i``."""
        return int(self._sub_of[i])

    def row_in_sub(self, i: int) -> int:
        """First token row of batch position ``i`` inside its sub-batch."""
        return int(self._row_in[i])

    def row_of_request(self) -> np.ndarray:
        """Row of each batch position in the hidden-state tensors, int ``[n]``."""
        return np.array([self.sub_row0(self.sub_of(i)) + self.row_in_sub(i)
                         for i in range(len(self.batch))], dtype=np.int64)

    def request_id(self, i: int) -> int:
        """Request id of batch position ``i``."""
        return int(self.ids[i])

    def seq_max_on_channel(self, c: int) -> int:
        """Tokens of the longest attention piece (a request, or a key block or KV segment of
        it: :func:`mapping.bufplan.attention_pieces`) on PIM channel ``c`` in any compiled
        layer."""
        return int(self._ch_max.get(c, 1))

    def lse_on_channel(self, c: int) -> bool:
        """Whether some request with a piece on PIM channel ``c`` runs in several pieces (its
        softmaxes write log-sum-exps for the merge)."""
        return bool(self._ch_lse.get(c, False))

    def seq_max_lane(self, s: int, lane: int, n_lanes: int) -> int:
        """Longest request of the batch (buffer size of an NPU attention lane)."""
        return int(self.seq.max())

    def block_tokens(self, s: int, b0: int, b1: int) -> np.ndarray:
        """Global token index (row of the routing) of rows ``[b0, b1)`` of sub-batch ``s``,
        int ``[b1 - b0]``."""
        assert self.token_rows is not None
        first = np.concatenate([[0], np.cumsum(self.q_tokens)[:-1]])
        out = []
        for i in self.members(s):
            out.append(self.token_rows[first[i]:first[i] + int(self.q_tokens[i])])
        rows = np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
        return rows[b0:b1]


@dataclass
class CompiledProgram:
    """A compiled program and everything needed to run, time, validate and explain it.

    Attributes:
        program: the :class:`isa.program.Program` (streams, data section).
        meta: per stream, per instruction metadata (:class:`mapping.builder.StreamMeta`).
        ops: operator names (graph nodes) indexed by ``meta[...].op``.
        stages: stage names indexed by ``meta[...].stage`` (schedule order).
        model, cfg, phase, layers, tp: what was compiled.
        batch: the batch with the channels used (positions = rows of ``sub_batches``).
        graph: the operator graph implemented (one layer, or the layers chained).
        placement: engine and kernel of every graph node.
        sub_batches: the sub-batch assignment.
        plan: the HBM plan (tensors, KV placements, layouts).
        row_of_request: int ``[n]``: first token row of each batch position in the
            ``hidden.*`` tensors (decode: its only row).
        q_tokens: int ``[n]``: token rows of each request (decode 1, prefill ``seq_len``,
            mixed its ``q_tokens``).
        spad_peak_bytes: highest scratchpad use of the allocation.
        n_semaphores: semaphores used.
        row_block: rows per GEMM-chain block (the largest sub-batch when it fits at once).
        channel_placement: how the channels were chosen (``policy min-load``, ``kept from
            FILE``; :func:`mapping.channels.describe_placement`).
        buffer_plan: how the scratchpad was divided (:class:`mapping.bufplan.BufferPlan`:
            attention key block, row block, weight ring).
        routing: a mixture-of-experts model's routing the program is specialised to (None
            for a dense model); with expert parallelism ``batch`` is device 0's requests and
            ``routing`` covers every device's tokens.
        expert_parallel: ``system.expert_parallel`` of the compile.
    """

    program: Program
    meta: dict[str, StreamMeta]
    ops: list[str]
    stages: list[str]
    model: ModelSpec
    cfg: MachineConfig
    phase: str
    layers: list[int]
    tp: int
    batch: Batch
    graph: nx.DiGraph
    placement: dict[str, Placement]
    sub_batches: SubBatchAssignment
    plan: HbmPlan
    row_of_request: np.ndarray
    spad_peak_bytes: int = 0
    n_semaphores: int = 0
    options: CompileOptions = field(default_factory=CompileOptions)
    row_block: int = 0
    q_tokens: np.ndarray | None = None
    channel_placement: str = ""
    buffer_plan: BufferPlan | None = None
    routing: Routing | None = None
    expert_parallel: int = 1

    @property
    def kv_placement_text(self) -> str:
        """One line on where the KV cache went: ``fixed``/``rotate``/``stream``, or for
        ``spill`` how many requests span several channels."""
        p = self.plan
        if p.kv_placement != "spill":
            return {"fixed": "fixed: each request's KV on its channel in every layer",
                    "rotate": "rotate: layer l's KV of a request on channel (c + l) mod "
                              f"{p.cfg.memory.org.channels} (fixed did not fit)",
                    "stream": "stream: K/V blocks in the linear address space, read through "
                              "the memory bus (no PIM)"}.get(p.kv_placement, p.kv_placement)
        segs = [len(kp.segments) for (l, _), kp in p.kv.items() if l == self.layers[0]]
        return (f"spill: {p.kv_spilled} of {len(segs)} requests keep the head of their KV on "
                f"their channel and the rest on up to {max(segs) - 1} other channel(s) "
                "(attention per channel, parts merged on the NPU)")

    # ------------------------------------------------------------------ correspondence
    def op_instructions(self, op: str) -> dict[str, np.ndarray]:
        """Instruction indices implementing graph node ``op``, per stream (sync included).

        Raises:
            MappingError: ``op`` is not an operator of this program.
        """
        try:
            k = self.ops.index(op)
        except ValueError:
            raise MappingError(f"no operator '{op}' in this program") from None
        out = {}
        for s, m in self.meta.items():
            idx = np.flatnonzero(m.op == k)
            if idx.size:
                out[s] = idx
        return out

    def stage_instructions(self, stage: str) -> dict[str, np.ndarray]:
        """Instruction indices of schedule stage ``stage`` per stream."""
        k = self.stages.index(stage)
        return {s: np.flatnonzero(m.stage == k) for s, m in self.meta.items()
                if (m.stage == k).any()}

    def link_instructions(self) -> list[dict]:
        """The program's link instructions (all-reduces, hand-offs) in stream order: stream,
        index, mnemonic, operator and operands, read from the instructions themselves."""
        out = []
        for s, instrs in self.program.streams.items():
            if not s.startswith("link"):
                continue
            for i, ins in enumerate(instrs):
                if ins.spec.engine.value == "link":
                    k = int(self.meta[s].op[i])
                    out.append({"stream": s, "index": i, "instruction": ins.mnemonic,
                                "op": self.ops[k] if k >= 0 else None, **ins.operands()})
        return out

    def instruction_counts(self) -> dict[str, int]:
        """Instructions by mnemonic over all streams."""
        c: Counter = Counter()
        for instrs in self.program.streams.values():
            c.update(i.mnemonic for i in instrs)
        return dict(sorted(c.items()))

    def macs_by_op(self) -> dict[str, int]:
        """Useful multiply-accumulates per graph node (from the instruction metadata)."""
        tot = np.zeros(len(self.ops), dtype=np.int64)
        for m in self.meta.values():
            sel = m.op >= 0
            np.add.at(tot, m.op[sel], m.macs[sel])
        return {o: int(v) for o, v in zip(self.ops, tot) if v}

    def macs_by_engine(self) -> dict[str, int]:
        """Useful MACs per engine kind (``sa``, ``vu``, ``pim``)."""
        out: dict[str, int] = defaultdict(int)
        for s, m in self.meta.items():
            out[_kind(s)] += int(m.macs.sum())
        return dict(out)

    def total_macs(self) -> int:
        """Useful MACs of the whole program."""
        return int(sum(int(m.macs.sum()) for m in self.meta.values()))

    # ------------------------------------------------------------------ addresses
    @property
    def tensors(self) -> dict[str, TensorPlacement]:
        """HBM tensors by name (weights ``L{l}.*``, ``hidden.{l}``, ``rope``, ``kv``)."""
        return self.plan.tensors

    def hidden_row_addresses(self, boundary: int) -> np.ndarray:
        """Byte address of each request's (first) row of ``hidden.{boundary}`` (input of layer
        ``boundary``, output of layer ``boundary - 1``), int ``[n]`` in batch order; a row holds
        ``d_model`` elements and a prefill request's ``seq_len`` rows follow one another."""
        t = self.plan.tensors[f"hidden.{boundary}"]
        return t.addr + self.row_of_request * self.model.d_model * t.elem_bytes

    def hidden_token_addresses(self, boundary: int, request: int) -> np.ndarray:
        """Element addresses ``[q_tokens, d_model]`` of batch position ``request``'s rows of
        ``hidden.{boundary}`` (axis 0: its tokens in order)."""
        t = self.plan.tensors[f"hidden.{boundary}"]
        q = 1 if self.q_tokens is None else int(self.q_tokens[request])
        r0 = int(self.row_of_request[request])
        d = self.model.d_model
        return t.addr + ((r0 + np.arange(q))[:, None] * d + np.arange(d)[None, :]) * t.elem_bytes

    def kv_addresses(self, layer: int, request: int) -> tuple[np.ndarray, np.ndarray]:
        """``(K, V)`` element addresses ``[seq_len, kv_heads, head_dim]`` of batch position
        ``request`` in ``layer`` (see :meth:`HbmPlan.kv_element_addresses`); the last token
        (``seq_len - 1``) is written by the program's KV append, earlier ones are inputs.
        With a sliding window axis 0 is the rolling-buffer slot (``min(seq_len, W)`` of them;
        :meth:`kv_position_addresses` maps positions)."""
        return self.plan.kv_element_addresses(layer, request)

    def kv_position_addresses(self, layer: int, request: int, positions
                              ) -> tuple[np.ndarray, np.ndarray]:
        """``(K, V)`` element addresses ``[len(positions), kv_heads, head_dim]`` of the tokens
        at ``positions`` (0-based, within the request's attended window) of batch position
        ``request`` in ``layer``: slot ``p mod W`` with a sliding window, ``p`` otherwise."""
        ka, va = self.plan.kv_element_addresses(layer, request)
        slots = [self.model.kv_slot(int(p)) for p in positions]
        return ka[slots], va[slots]

    def rope_positions(self) -> np.ndarray:
        """Token position of each row of the ``rope`` table (decode: ``seq_len - 1``; prefill:
        ``0 .. seq_len - 1`` of each request), int ``[rows]`` in row order; a table row holds
        fp32 ``cos(p * f_i)`` then ``sin(p * f_i)``
        for ``i < head_dim/2``, ``f_i = rope_theta ** (-2 i / head_dim)``."""
        q = self.q_tokens if self.q_tokens is not None else np.ones(len(self.batch), np.int64)
        pos = np.zeros(int(q.sum()), dtype=np.int64)
        for i, (r0, n, L) in enumerate(zip(self.row_of_request, q, self.batch.seq_lens)):
            pos[r0:r0 + n] = np.arange(L - n, L)
        return pos

    @property
    def layer_key(self) -> tuple:
        """Equal for two compiled layers whose programs differ only in base addresses."""
        chans = tuple((p.channel, tuple((g.token0, g.tokens, g.channel) for g in p.segments))
                      for (l, i), p in sorted(self.plan.kv.items()) if l == self.layers[0])
        q = () if self.q_tokens is None else tuple(self.q_tokens.tolist())
        route = None if self.routing is None else tuple(
            map(tuple, np.asarray(self.routing.experts[self.layers[0]]).tolist()))
        return (self.model.name, self.phase, tuple(self.batch.seq_lens.tolist()), q, chans,
                tuple(self.sub_batches.sub_batch.tolist()), self.cfg.model_dump_json(), route)

    # ------------------------------------------------------------------ summary
    def kv_footprint_per_channel(self) -> list[int]:
        """KV bytes reserved per channel (all placed layers); empty for streaming KV."""
        return self.plan.kv_footprint_per_channel()

    def bytes_by_engine(self) -> dict[str, int]:
        """Bytes moved per engine kind: DMA (HBM<->scratchpad), PIM (GWRITE in, READRES/GEMV
        results out; KV rows read inside the banks are counted as ``pim_bank_read``)."""
        org = self.cfg.memory.org
        eb = DTYPE_BYTES
        out: dict[str, int] = defaultdict(int)
        page = org.page_size_bytes
        for s, instrs in self.program.streams.items():
            for ins in instrs:
                mn = ins.mnemonic
                if mn in ("DMA_LOAD", "DMA_STORE"):
                    out["dma"] += ins["rows"] * ins["cols"] * eb[ins["dtype"]]
                elif mn == "GWRITE":
                    out["pim_gwrite"] += ins["len"] * eb[ins["dtype"]]
                elif mn in ("PIM_GEMV", "READRES"):
                    out["pim_results"] += org.banks_per_channel * eb[ins["dtype"]]
                if mn in ("PIM_GEMV", "COMP"):
                    out["pim_bank_read"] += (ins["n_comps"] * self.cfg.pim.multipliers_per_bank
                                             * eb[ins["dtype"]] * org.banks_per_channel)
        del page
        return dict(out)

    def summary(self) -> dict[str, Any]:
        """JSON-friendly summary: counts by opcode, bytes and MACs per engine, KV footprint per
        channel, sub-batch assignment, placement by engine, scratchpad peak."""
        eng: Counter = Counter(p.engine for p in self.placement.values())
        return {
            "model": self.model.name, "system": self.cfg.name, "phase": self.phase,
            "layers": self.layers, "tensor_parallel": self.tp, "requests": len(self.batch),
            "dtype": self.plan.tensors[f"hidden.{self.layers[0]}"].dtype,
            "instructions": self.program.n_instructions,
            "instruction_counts": self.instruction_counts(),
            "instructions_per_stream": {s: len(v) for s, v in self.program.streams.items()},
            "bytes_by_engine": self.bytes_by_engine(),
            "macs_by_engine": self.macs_by_engine(),
            "macs_total": self.total_macs(),
            "placement_by_engine": dict(sorted(eng.items())),
            "kv_placement": self.plan.kv_placement,
            "kv_spilled_requests": self.plan.kv_spilled,
            "kv_placement_text": self.kv_placement_text,
            "kv_footprint_bytes_per_channel": self.kv_footprint_per_channel(),
            "kv_useful_bytes": int(sum(2 * p.seq_len * self.model.kv_heads_per_device(self.tp)
                                       * self.model.head_dim * DTYPE_BYTES[
                                           self.plan.tensors[f"hidden.{self.layers[0]}"].dtype]
                                       for p in self.plan.kv.values())),
            "pim_kv_layout": self.plan.pim_layout.to_dict() if self.plan.pim_layout else None,
            "sub_batches": self.sub_batches.to_dict(),
            "channels": [int(c) for c in self.batch.channels],
            "channel_placement": self.channel_placement,
            "stages": self.stages,
            "collectives": self.link_instructions(),
            "scratchpad_peak_bytes": self.spad_peak_bytes,
            "row_block": self.row_block,
            "buffer_plan": self.buffer_plan.to_dict() if self.buffer_plan else None,
            "semaphores": self.n_semaphores,
            "routing": None if self.routing is None else self.routing.summary(),
        }


def _kind(stream: str) -> str:
    return stream.rstrip("0123456789")


# ---------------------------------------------------------------------------------- helpers
def _resolve_tp(model: ModelSpec, cfg: MachineConfig) -> int:
    tp = cfg.system.tensor_parallel or model.tensor_parallel
    model.check_tensor_parallel(tp)
    return tp


def _stage_layers(model: ModelSpec, cfg: MachineConfig, stage: int) -> list[int]:
    pp = cfg.system.pipeline_parallel or model.pipeline_parallel
    if model.n_layers % pp:
        raise MappingError(f"pipeline_parallel {pp} does not divide the {model.n_layers} layers "
                           f"of model '{model.name}'")
    if not 0 <= stage < pp:
        raise MappingError(f"pipeline stage {stage} not in 0..{pp - 1}")
    per = model.n_layers // pp
    return list(range(stage * per, (stage + 1) * per))


# ---------------------------------------------------------------------------------- compile
def compile_layers(model: ModelSpec, batch: Batch, cfg: MachineConfig, phase: str = "decode",
                   layers: list[int] | None = None,
                   options: CompileOptions | None = None,
                   routing: Routing | None = None) -> CompiledProgram:
    """Compile consecutive decoder ``layers`` (default: every layer of the pipeline stage).

    Args:
        model: the model (``workloads.get_model``); its ``dtype_bytes`` sets the element type
            unless ``options.dtype`` overrides it.
        batch: the requests (``seq_len`` = KV positions covered, including this step's token).
        cfg: the machine (``archsim.config.load_config``).
        phase: ``'decode'`` (one new token per request, attention over ``seq_len`` keys),
            ``'prefill'`` (``seq_len`` prompt tokens per request, causal attention on the NPU,
            the KV cache written for all of them; one sub-batch whatever
            ``system.sub_batches`` says: interleaving overlaps PIM attention with NPU GEMMs,
            and prefill attention runs on the NPU, so a second sub-batch only streams the
            weights once more: measured on GPT3-7B, 2 requests of 5 and 2 tokens take 8.22 ms
            with two sub-batches and 4.41 ms with one, and 11 prompts of 2,000 tokens in all
            52.5 vs 52.8 ms) or ``'mixed'`` (chunked prefill: each request its ``q_tokens``;
            decode steps as in decode, prompt chunks as in prefill with the chunk's attention
            also over its ``seq_len - q_tokens`` cached keys, read from the KV cache, and its
            K/V appended after them; the QKV, projection and FFN GEMMs of a sub-batch take its
            decode rows and chunk rows together, so the decode rows ride along with the
            chunk's weight streaming. Sub-batches: the decode steps are split by
            ``system.sub_batches`` / ``sub_batch_policy`` as in decode, then each chunk,
            largest first, joins the sub-batch with the fewest token rows
            (:func:`mapping.subbatch.split_with_chunks`); one sub-batch without decode steps,
            as in prefill).
        layers: consecutive layer indices of the pipeline stage.
        options: :class:`CompileOptions`.
        routing: a mixture-of-experts model's routing of this iteration (covering the stage's
            layers; :mod:`mapping.moe`); None draws it from ``system.moe_router``. With
            ``system.expert_parallel = ep > 1`` the program is device 0's: attention for the
            requests at batch positions ``0, ep, ...``, experts ``[0, E/ep)`` over every token
            routed to them, ``ALL_TO_ALL`` dispatch and return.

    Returns:
        a :class:`CompiledProgram`.

    Raises:
        MappingError: bad layers/phase/options, MoE keys that do not fit the model
            (:func:`mapping.moe.resolve_routing`); PlacementError (an op no engine of the system
            can run, naming the op and the engines tried); CapacityError (KV cache, HBM or
            scratchpad too small: names the channel/memory, bytes needed and available);
            UnsupportedError (a model feature the ISA cannot express yet).
        archsim.errors.ArchsimError: a request's channel outside the machine, or ``keep`` on a
            batch without a channel for every request (:func:`mapping.channels.assign_channels`).
        workloads.errors.WorkloadError: a request longer than the model's context, empty batch.
    """
    # graph, plan and code: up to millions of small acyclic objects, which the cyclic GC would
    # traverse again and again as they pile up (~20 % of a decode compile). Once _compile
    # returns, the builder's records are freed; the young objects left (mostly the program)
    # are traversed once, here (as the next allocation would)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        out = _compile(model, batch, cfg, phase, layers, options, routing, gc_was_enabled)
    finally:
        if gc_was_enabled:
            gc.enable()
    if gc_was_enabled:
        gc.collect(0)
    return out


def _compile(model: ModelSpec, batch: Batch, cfg: MachineConfig, phase: str,
             layers: list[int] | None, options: CompileOptions | None,
             routing: Routing | None, collect: bool) -> CompiledProgram:
    """:func:`compile_layers` with the cyclic GC off (``collect``: the caller's was on)."""
    opts = options or CompileOptions()
    if phase not in PHASES:
        raise UnsupportedError(f"phase '{phase}': the compiler emits {', '.join(PHASES)} "
                               "programs")
    if "gpu" in cfg.system.engines:
        raise MappingError(f"system '{cfg.name}' is a GPU roofline model (engines "
                           f"{list(cfg.system.engines)}): there is no ISA program to compile")
    if not isinstance(batch, Batch):
        batch = Batch(tuple(batch))
    # lengths against the model's context: checked by the graph builder (build_layer_graph)
    tp = _resolve_tp(model, cfg)
    stage_layers = _stage_layers(model, cfg, opts.stage)
    pp = cfg.system.pipeline_parallel or model.pipeline_parallel
    layers = list(stage_layers if layers is None else layers)
    if not layers or any(l not in stage_layers for l in layers) or layers != list(
            range(layers[0], layers[0] + len(layers))):
        raise MappingError(f"layers {layers} must be consecutive layers of pipeline stage "
                           f"{opts.stage} ({stage_layers[0]}..{stage_layers[-1]})")
    dtype = opts.dtype or {2: "fp16", 4: "fp32"}.get(model.dtype_bytes)
    if dtype not in DTYPE_BYTES:
        raise UnsupportedError(f"element type of {model.dtype_bytes} bytes: the ISA has "
                               "fp16, bf16 and fp32")
    eb = DTYPE_BYTES[dtype]
    if eb != model.dtype_bytes:
        model = model.replace(dtype_bytes=eb)
    q_all = query_tokens(batch, phase)
    chunk = np.full(len(batch), phase == "prefill") if phase != "mixed" else q_all > 1
    # what the program holds (buffer plan, staging): mixed without chunks is decode, etc.
    kind = "decode" if not chunk.any() else "prefill" if chunk.all() else "mixed"
    window = model.sliding_window
    if window is not None and chunk.any() and int(batch.seq_lens[chunk].max()) > window:
        i = int(np.argmax(chunk & (batch.seq_lens > window)))
        raise UnsupportedError(
            f"prefill of request index {i} ({int(batch.seq_lens[i])} tokens) is longer than "
            f"model '{model.name}''s sliding window of {window}: the banded prefill mask and "
            "the rolling-buffer store of a prompt's last W tokens are not mapped (decode over "
            "the window is; prompts up to the window prefill as full attention)")
    routing = resolve_routing(model, batch, cfg, phase, stage_layers, routing)
    ep = 1 if routing is None else routing.expert_parallel
    full = batch
    batch, positions = local_batch(batch, ep)     # device 0's requests (all when ep = 1)
    q_all, chunk = q_all[positions], chunk[positions]
    kv_lens = batch.seq_lens if window is None else np.minimum(batch.seq_lens, window)
    batch, channel_placement = assign_channels(
        batch, cfg, keep=opts.channels == "keep",
        cost="seq_len" if window is None else (lambda s: np.minimum(s, window)))
    if ep > 1:                                    # the whole batch, device 0's channels in it
        reqs = list(full.requests)
        for j, i in enumerate(positions):
            reqs[int(i)] = batch[j]
        full = Batch(tuple(reqs), full.source)
    else:
        full = batch
    token_rows = None
    if routing is not None:                      # routing rows of device 0's tokens
        token_rows = np.flatnonzero(np.isin(routing.token_request, positions)).astype(np.int64)
    graph = stack_graph(model, full, phase, tp, layers, routing)
    if collect:     # the layer graphs stack_graph let go: cycles (networkx views), ~4 MB each
        gc.collect(0)
    placement = place_graph(graph, cfg.system.engines, tp,
                            details={"ffn_act": model.activation,
                                     "expert_act": model.activation,
                                     "moe_combine": "moe_combine"}, ep=ep)
    on_pim = any(p.engine == "pim" for n, p in placement.items()
                 if graph.nodes[n]["kind"] == "attention_score")
    kv_pim = cfg.system.has_pim   # KV in the PIM layout whenever there is PIM (prefill too)
    n_sub = 1 if chunk.all() else cfg.system.sub_batches
    if n_sub == "auto":
        raise MappingError("system.sub_batches: auto is chosen by the runtime per iteration "
                           "(archsim run, compare, --serve); a compiled program needs a count: "
                           "--set system.sub_batches=N")
    if phase == "mixed":
        sub = split_with_chunks(kv_lens, batch.channels, q_all, n_sub,
                                cfg.system.sub_batch_policy)
    else:
        sub = split_sub_batches(kv_lens, batch.channels, n_sub, cfg.system.sub_batch_policy)
    # ---- HBM plan
    plan = HbmPlan(cfg, AddressMapping(cfg.memory))
    npu = cfg.npu
    for l in stage_layers:
        add_layer_weights(plan, model, tp, l, dtype, (npu.array_height, npu.array_width), ep)
    d = model.d_model
    n = int(q_all.sum())
    for l in stage_layers + [stage_layers[-1] + 1]:
        plan.add_linear(f"hidden.{l}", (n, d), dtype, "activation")
    if model.positional == "rope":
        plan.add_linear("rope", (n, 2, model.head_dim // 2), "fp32", "activation")
    if chunk.any():   # prompt rows' q|k|v and attention outputs go through HBM (all layers)
        Hq_, Hkv_ = model.heads_per_device(tp), model.kv_heads_per_device(tp)
        plan.add_linear("pf_qkv", (n, (Hq_ + 2 * Hkv_) * model.head_dim), dtype, "activation")
        plan.add_linear("pf_ao", (n, Hq_ * model.head_dim), dtype, "activation")
    kv_layers = stage_layers if opts.kv_layers == "model" else layers
    Hkv = model.kv_heads_per_device(tp)
    if kv_pim:
        org = cfg.memory.org
        plan.pim_layout = PimKvLayout.create(
            banks=org.banks_per_channel, page_bytes=org.page_size_bytes, elem_bytes=eb,
            mults=cfg.pim.multipliers_per_bank, head_dim=model.head_dim, kv_heads=Hkv,
            q_per_kv=model.heads_per_device(tp) // Hkv, run=opts.value_run,
            gemv_fill=cfg.pim.gemv_pipeline_fill)
        add_qkv_staging(plan, model, tp, kind, n, dtype)   # below the KV region's rows
        check_linear_capacity(plan)
        place_kv_pim(plan, batch.seq_lens, batch.ids, batch.channels, kv_layers,
                     opts.kv_placement, opts.reserve_tokens, window)
    else:
        plan.stream_layout = StreamKvLayout(model.head_dim, Hkv,
                                            model.heads_per_device(tp) // Hkv, eb)
        place_kv_stream(plan, batch.seq_lens, batch.ids, kv_layers, opts.reserve_tokens,
                        window)
        add_qkv_staging(plan, model, tp, kind, n, dtype)   # after the KV: no address moves
        check_linear_capacity(plan)
    # ---- code. The buffer plan (mapping.bufplan): the attention block is chosen above;
    # the weight ring and the GEMM row block by trying to generate the code
    # (search_buffer_plan).
    rows_max = max(1, max(int(q_all[sub.members(s)].sum()) for s in range(n_sub)))
    attn_full, gran = layer_attention_block(cfg, plan, model, tp, layers, kind, on_pim, eb,
                                            opts.value_run, PREFILL_Q_TILE)

    def attempt(block: int, ring: int, attn_block: int, staged: bool = False):
        ctx = Context(model, batch, cfg, phase, layers, tp, sub, plan, dtype, on_pim,
                      opts.value_run, block, ring, attn_block, routing, token_rows, staged,
                      chunk)
        try:
            cg = Codegen(ctx)
            if opts.stage > 0:                        # pipeline hand-off in: hidden.{first}
                cg.handoff("recv", layers[0], opts.stage - 1)
            for st in stage_schedule(layers, n_sub):
                ctx.builder.set_stage(st.name)
                for it in st.npu:
                    ctx.builder.set_layer(it.layer)
                    (cg.emit_qkv if it.kind == "qkv" else cg.emit_pf)(it.layer, it.sub)
                for it in st.attn:
                    ctx.builder.set_layer(it.layer)
                    cg.emit_attn(it.layer, it.sub)
            if opts.stage < pp - 1:                   # and out: hidden.{last + 1}
                cg.handoff("send", layers[-1] + 1, opts.stage + 1)
        except CapacityError as exc:
            if not str(exc).startswith("scratchpad"):
                raise
            return exc
        return ctx, cg

    ring = ring_depth(npu.scratchpad.size_bytes,
                      npu.n_arrays * npu.array_height * npu.array_width * eb,
                      opts.weight_buffers)
    got, row_block, attn_block, staged = search_buffer_plan(
        attempt, rows_max, ring, npu.scratchpad.size_bytes, attn_full,
        min(gran, attn_full), gran, can_stage=kind == "decode",
        largest_first=kind == "prefill")
    ctx, cg = got
    B = ctx.builder
    data = _data_section(plan, layers, stage_layers, dtype, ctx.qkv_staged)
    built: BuiltProgram = B.finish(data, npu.scratchpad.size_bytes)
    longest = int(ctx.seq.max()) if len(batch) else 0
    rows_sub = max(ctx.rows_per_sub(s) for s in range(n_sub))
    bplan = BufferPlan(
        scratchpad_bytes=npu.scratchpad.size_bytes, attn_block_tokens=min(attn_block, longest),
        max_attn_tokens=longest, attn_blocks_max=ceil_div(longest, attn_block),
        row_block=min(row_block, rows_sub), rows_max=rows_sub,
        weight_buffers=len(cg.wbuf[0]), attention_bytes=cg.attention_bytes(),
        peak_bytes=cg.spad.peak_bytes, qkv_staged=staged)
    return CompiledProgram(
        program=built.program, meta=built.meta, ops=built.ops, stages=built.stages, model=model,
        cfg=cfg, phase=phase, layers=layers, tp=tp, batch=batch, graph=graph,
        placement=placement, sub_batches=sub, plan=plan, row_of_request=ctx.row_of_request(),
        spad_peak_bytes=cg.spad.peak_bytes,
        n_semaphores=built.n_semaphores, options=opts,
        row_block=min(row_block, max(ctx.rows_per_sub(s) for s in range(n_sub))),
        q_tokens=ctx.q_tokens, channel_placement=channel_placement, buffer_plan=bplan,
        routing=routing, expert_parallel=ep)


def _data_section(plan: HbmPlan, layers: list[int], stage_layers: list[int],
                  dtype: str, qkv_staged: bool = False) -> list[DataAlloc]:
    used = {"dq_qkv"} if qkv_staged else set()
    for l in layers:
        used.update(n for n in plan.tensors if n.startswith(f"L{l}."))
        used.add(f"hidden.{l}")
        used.add(f"hidden.{l + 1}")
    used.update(n for n in ("rope", "kv", "pf_qkv", "pf_ao") if n in plan.tensors)
    out = []
    for name in sorted(used, key=lambda n: plan.tensors[n].addr):
        t = plan.tensors[name]
        out.append(DataAlloc(name, t.addr, t.size_bytes, t.shape, t.dtype, t.kind))
    if plan.pim_layout is not None and plan.kv_rows_used is not None:
        slab = rows_slab_bytes(plan.cfg)
        rows = int(plan.kv_rows_used.max())
        if rows:
            eb = DTYPE_BYTES[dtype]
            out.append(DataAlloc("kv", plan.kv_row0 * slab, rows * slab,
                                 (rows * slab // eb,), dtype, "kv"))
    return out


def compile_layer(model: ModelSpec, batch: Batch, cfg: MachineConfig, phase: str = "decode",
                  layer: int = 0, options: CompileOptions | None = None,
                  routing: Routing | None = None) -> CompiledProgram:
    """Compile decoder layer ``layer`` (see :func:`compile_layers`; KV of every layer of the
    pipeline stage is placed, so addresses equal those of :func:`compile_model`)."""
    return compile_layers(model, batch, cfg, phase, [layer], options, routing)


def compile_model(model: ModelSpec, batch: Batch, cfg: MachineConfig, phase: str = "decode",
                  options: CompileOptions | None = None,
                  routing: Routing | None = None) -> CompiledProgram:
    """Compile every decoder layer of the device's pipeline stage, interleaved across layers
    by the stage schedule (see :func:`compile_layers`). Embedding and LM head are not part of
    the program: the host provides ``hidden.{first layer}`` and reads ``hidden.{last + 1}``."""
    return compile_layers(model, batch, cfg, phase, None, options, routing)


__all__ = ["compile_layer", "compile_model", "compile_layers", "CompiledProgram",
           "CompileOptions", "Context", "PHASES"]
