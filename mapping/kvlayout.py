"""KV-cache layout arithmetic: where each key/value element of a request lives.

Two layouts, both for one layer of one tensor-parallel device:

**PIM layout** (DESIGN §3, NeuPIMs §4 / its reference ``NeuPIMSLogitSoftmax``/``NeuPIMSAttend``).
A request's K and V live in *one* channel, in whole *row groups* (the same DRAM row in every bank
of the channel, so that one broadcast ``G_ACT`` opens it everywhere).

* Keys, one token per bank: token ``t`` sits in bank ``t mod B`` (``B`` banks per channel) of
  token group ``g = t // B``; a bank row holds ``heads_per_key_row`` KV heads of that token, each
  ``head_stride`` elements (``head_dim`` rounded up to whole COMP steps). With ``key_chunks`` rows
  per token group, row ``g * key_chunks + c`` holds heads ``c * heads_per_key_row ...``.
  ``q . K^T`` of one head over one row group is one ``PIM_GEMV`` whose ``B`` results are the scores
  of the group's ``B`` tokens.
* Values, a slice of head dimensions for a run of tokens per bank: a row is cut into
  ``slots = page_elems / run`` segments of ``run`` consecutive tokens. Head dimension
  ``d = j * B + b`` of KV head ``h`` lives in bank ``b``, *dimension tile* ``j``; row
  ``(u * value_groups + gv) * dim_tiles + j`` holds, in slot ``i``, the run ``u`` (tokens
  ``u*run ...``) of tile ``j`` of KV head ``gv * slots + i``. ``p . V`` of one head over one run
  and one tile is one ``PIM_GEMV`` (``ceil(valid / multipliers)`` COMP steps at column step
  ``i * run / multipliers``) whose ``B`` results are ``B`` head dimensions, partial over the run;
  the NPU adds the runs. The global buffer holds, per slot, the probabilities of that slot's head
  for the run (one ``GWRITE`` serves all ``dim_tiles`` rows of a run and value group).

* **Packing** when a device holds fewer KV heads than a row has slots (grouped-query attention
  with tensor parallelism: LLaMA-2 70B on 8 devices keeps one KV head each): a key row holds
  ``key_pack = heads_per_key_row // kv_heads`` token groups, slot ``o * kv_heads + h`` holding
  head ``h`` of group ``g`` with ``o = g mod key_pack`` (row ``g // key_pack``); a value row holds
  ``value_pack = slots // kv_heads`` runs the same way. The rows are full instead of a quarter
  full (one KV head in a 4-slot row), and one ``G_ACT`` serves ``key_pack`` token groups: the
  global buffer then holds the query once per packed group (``GWRITE`` of the heads repeated
  ``key_pack`` times), and a value row's GWRITE carries ``value_pack`` runs of probabilities.
  Without packing (``kv_heads`` at least the slots) both are 1 and the layout is the one above.

  The reference uses ``run = page_elems`` (one dimension per bank row, 512 tokens): up to 511
  tokens of padding per head and tile. The default here is the shortest run whose fused GEMV
  still has no pipeline-fill penalty (``run / multipliers >= pim.gemv_pipeline_fill``), 128 tokens
  on the reference machine: the same number of GEMVs per token at a quarter of the padding, which
  is what lets a 512-request GPT3-7B batch keep all 32 layers of KV in the device.

**Streaming layout** (NPU-only systems, attention through the external bus): per request and
KV head, K and V are dense row-major ``[seq_len, head_dim]`` blocks in the linear address space
(consecutive 1 KB pages rotate over channels with the default address mapping, so a block
streams from all channels at once).

All quantities are element counts unless the name says bytes; rows are DRAM row indices
relative to the start of the request's allocation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from mapping.errors import MappingError


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for non-negative integers."""
    return -(-a // b)


@dataclass(frozen=True)
class PimKvLayout:
    """Geometry of the PIM KV layout for one model shard on one machine.

    Attributes:
        banks: banks per channel (B).
        page_elems: elements per DRAM row of one bank (page bytes / element bytes).
        mults: elements per COMP step (multipliers per bank).
        head_dim: elements per head.
        kv_heads: KV heads on the device.
        q_per_kv: query heads per KV head (GQA group size).
        head_stride: elements reserved per head in a key row (head_dim rounded up to COMP steps).
        heads_per_key_row: KV heads in one key row.
        key_chunks: key rows per token group (= ceil(kv_heads / heads_per_key_row)).
        run: tokens per value run (elements of one slot).
        slots: value slots per row (page_elems / run).
        dim_tiles: dimension tiles per head (ceil(head_dim / B)).
        value_groups: value rows per (run, tile) (= ceil(kv_heads / slots)).
        elem_bytes: bytes per element.
        key_pack: token groups per key row (``heads_per_key_row // kv_heads`` when fewer KV
            heads than key slots, else 1; module docstring).
        value_pack: value runs per value row (``slots // kv_heads`` likewise, else 1).
    """

    banks: int
    page_elems: int
    mults: int
    head_dim: int
    kv_heads: int
    q_per_kv: int
    head_stride: int
    heads_per_key_row: int
    key_chunks: int
    run: int
    slots: int
    dim_tiles: int
    value_groups: int
    elem_bytes: int
    key_pack: int = 1
    value_pack: int = 1

    # -------------------------------------------------------------------------- construction
    @classmethod
    def create(cls, *, banks: int, page_bytes: int, elem_bytes: int, mults: int, head_dim: int,
               kv_heads: int, q_per_kv: int = 1, run: int | None = None,
               gemv_fill: int = 6) -> "PimKvLayout":
        """Derive the layout from the machine (banks, page, multipliers) and the model shard.

        Args:
            banks: banks per channel.
            page_bytes: bytes per DRAM row of one bank.
            elem_bytes: bytes per KV element (2 for fp16).
            mults: elements per COMP step (``pim.multipliers_per_bank``).
            head_dim: elements per head; kv_heads: KV heads on the device; q_per_kv: GQA group.
            run: tokens per value run; None picks the default (see the module docstring).
            gemv_fill: ``pim.gemv_pipeline_fill`` (COMP steps a fused GEMV costs at least).

        Raises:
            MappingError: a head or a COMP step larger than a row, a run that does not divide
                the row or is not a whole number of COMP steps.
        """
        page_elems = page_bytes // elem_bytes
        if page_bytes % elem_bytes or page_elems < mults:
            raise MappingError(f"PIM KV layout: a {page_bytes}-byte row holds {page_elems} "
                               f"elements, fewer than one COMP step of {mults}")
        head_stride = ceil_div(head_dim, mults) * mults
        if head_stride > page_elems:
            raise MappingError(
                f"PIM KV layout: head_dim {head_dim} (padded to {head_stride} for {mults}-element "
                f"COMP steps) does not fit a {page_elems}-element row; keys of one head must sit "
                "in one bank row")
        hpr = page_elems // head_stride
        if page_elems % mults:
            near = [d for d in range(1, page_elems + 1) if page_elems % d == 0
                    and mults / 4 <= d <= 4 * mults][:4]
            raise MappingError(
                f"pim.multipliers_per_bank = {mults} must divide the {page_elems} elements of a "
                f"DRAM row (memory.org.page_size_bytes {page_bytes} / {elem_bytes} B per "
                f"element): PIM value runs are whole COMP steps of {mults} elements packed into "
                f"a row; e.g. {', '.join(map(str, near))}")
        if run is None:
            run = mults
            while run < page_elems and run // mults < max(gemv_fill, 1):
                run *= 2
            run = min(run, page_elems)
            while page_elems % run:
                run //= 2
        if run < mults or run % mults or page_elems % run:
            raise MappingError(f"PIM KV layout: value run {run} must be a multiple of the "
                               f"{mults}-element COMP step dividing the {page_elems}-element row")
        slots = page_elems // run
        return cls(banks=banks, page_elems=page_elems, mults=mults, head_dim=head_dim,
                   kv_heads=kv_heads, q_per_kv=q_per_kv, head_stride=head_stride,
                   heads_per_key_row=hpr, key_chunks=ceil_div(kv_heads, hpr), run=run,
                   slots=slots, dim_tiles=ceil_div(head_dim, banks),
                   value_groups=ceil_div(kv_heads, slots), elem_bytes=elem_bytes,
                   key_pack=max(1, hpr // kv_heads), value_pack=max(1, slots // kv_heads))

    # -------------------------------------------------------------------------- sizes
    def token_groups(self, seq_len: int) -> int:
        """Key token groups of a request: ceil(seq_len / B)."""
        return ceil_div(seq_len, self.banks)

    def runs(self, seq_len: int) -> int:
        """Value runs of a request: ceil(seq_len / run)."""
        return ceil_div(seq_len, self.run)

    def key_rows(self, seq_len: int) -> int:
        """Row groups holding a request's keys."""
        return ceil_div(self.token_groups(seq_len), self.key_pack) * self.key_chunks

    def value_rows(self, seq_len: int) -> int:
        """Row groups holding a request's values."""
        return ceil_div(self.runs(seq_len), self.value_pack) * self.value_groups * self.dim_tiles

    def granule(self) -> int:
        """Tokens of whole key rows and whole value rows: a token range starting at a multiple
        of it starts a key row and a value row (key blocks, KV segments on other channels)."""
        return math.lcm(self.banks * self.key_pack, self.run * self.value_pack)

    def rows(self, seq_len: int) -> int:
        """Row groups (rows in every bank of the channel) of one request and one layer."""
        return self.key_rows(seq_len) + self.value_rows(seq_len)

    def row_group_bytes(self) -> int:
        """Bytes of one row group: B banks x one page."""
        return self.banks * self.page_elems * self.elem_bytes

    def kv_bytes(self, seq_len: int) -> int:
        """Useful K+V bytes of one request and layer: 2 x seq_len x kv_heads x head_dim x b."""
        return 2 * seq_len * self.kv_heads * self.head_dim * self.elem_bytes

    def scores_cols(self, seq_len: int) -> int:
        """Columns of the per-request score/probability buffers: covers the key groups and
        the value runs (max(G*B, U*run))."""
        return max(self.token_groups(seq_len) * self.banks, self.runs(seq_len) * self.run)

    # -------------------------------------------------------------------------- positions
    def key_pos(self, token: int, kv_head: int) -> tuple[int, int, int]:
        """(row, bank, first element in the row) of key ``token`` of ``kv_head``; the head's
        ``head_dim`` elements follow contiguously in that bank row."""
        g, b = divmod(token, self.banks)
        return self.key_row(g, kv_head // self.heads_per_key_row), b, self.key_col(g, kv_head)

    def key_row(self, group, chunk):
        """Row (relative) of key token group ``group``, head chunk ``chunk`` (ints or numpy
        arrays)."""
        return (group // self.key_pack) * self.key_chunks + chunk

    def key_col(self, group, kv_head):
        """First element, in its key row, of head ``kv_head`` of token group ``group``: slot
        ``(group mod key_pack) * kv_heads + kv_head`` when packed, else the head's slot in its
        chunk (ints or numpy arrays). Heads of one group and chunk are contiguous."""
        per = min(self.kv_heads, self.heads_per_key_row)
        return ((group % self.key_pack) * per + kv_head % self.heads_per_key_row) \
            * self.head_stride

    def value_row(self, run, group, tile):
        """Row (relative to the request's value base) of run ``run``, value group ``group``,
        dimension tile ``tile`` (ints or numpy arrays)."""
        return ((run // self.value_pack) * self.value_groups + group) * self.dim_tiles + tile

    def value_col(self, run, kv_head):
        """First element, in its value row, of run ``run`` of head ``kv_head``: slot
        ``(run mod value_pack) * kv_heads + kv_head`` when packed, else the head's slot in its
        group (ints or numpy arrays); the run's tokens follow contiguously."""
        per = min(self.kv_heads, self.slots)
        return ((run % self.value_pack) * per + kv_head % self.slots) * self.run

    def value_pos(self, token: int, kv_head: int, dim: int) -> tuple[int, int, int]:
        """(row relative to the value base, bank, element in the row) of V[token, kv_head, dim]."""
        u, t = divmod(token, self.run)
        j, b = divmod(dim, self.banks)
        return (self.value_row(u, kv_head // self.slots, j), b,
                self.value_col(u, kv_head) + t)

    def to_dict(self) -> dict:
        """JSON-friendly form of the geometry."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class StreamKvLayout:
    """Streaming layout (NPU-only): per request and KV head, dense ``[seq_len, head_dim]`` K then
    V blocks. ``block_bytes(L)`` is one of them; a request uses ``2 * kv_heads`` blocks."""

    head_dim: int
    kv_heads: int
    q_per_kv: int
    elem_bytes: int

    def block_bytes(self, seq_len: int) -> int:
        """Bytes of one ``[seq_len, head_dim]`` block."""
        return seq_len * self.head_dim * self.elem_bytes

    def bytes(self, seq_len: int) -> int:
        """K+V bytes of one request and layer."""
        return 2 * self.kv_heads * self.block_bytes(seq_len)

    def offset(self, seq_len: int, which: str, kv_head: int) -> int:
        """Byte offset of the K (``which='k'``) or V block of ``kv_head`` in the allocation."""
        i = kv_head if which == "k" else self.kv_heads + kv_head
        return i * self.block_bytes(seq_len)


def default_value_run(page_elems: int, mults: int, fill: int) -> int:
    """The default value run (see the module docstring) for a row of ``page_elems``."""
    run = mults
    while run < page_elems and run // mults < max(fill, 1):
        run *= 2
    run = min(run, page_elems)
    while page_elems % run:
        run //= 2
    return max(run, math.gcd(page_elems, mults))


__all__ = ["PimKvLayout", "StreamKvLayout", "ceil_div", "default_value_run"]
