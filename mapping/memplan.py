"""HBM and scratchpad allocation: real byte addresses for weights, activations and the KV cache.

HBM map of one device (byte addresses follow ``memory.controller.address_mapping``, decoded by
:class:`archsim.memory.addrmap.AddressMapping`)::

    [0, linear_bytes)          linear region: weights of every layer, hidden states, RoPE table
                               (and, on an NPU-only system, the streaming KV cache)
    rows [kv_row0, rows)       PIM KV region (systems with PIM): per channel, row groups
                               allocated layer by layer, request by request (batch order)

The PIM KV region needs the row field to be the most significant address field (so that "rows
>= kv_row0 of every bank" is the address range above the linear region): true for the reference
mapping ``rorabgbachco``. Weights are stored *tiled* for the systolic arrays: ``[k, n]`` as tiles
of ``array_height x array_width`` (edge tiles smaller), row block by row block: tile ``(kb, nb)``
at byte offset ``(kb * H * n + kh * nb * W) * b`` (``kh`` = height of row block ``kb``), each
tile dense row-major, so one tile is one contiguous DMA. The arrays of a GEMM work on
neighbouring column blocks ``nb`` at the same ``kb`` at the same time, so the tiles they load
together are neighbours in memory and spread over banks. (Column-block-major order put them
``k x W x b`` bytes apart: 1 MiB for GPT3-7B, a multiple of the 32 KiB bank period of the
reference mapping, so all eight arrays read different rows of the same bank in every channel,
and row conflicts halved the bandwidth a weight stream reached.) Activations are dense
row-major.

KV placement across layers (``kv_placement``): ``fixed`` keeps every request on its channel in
every layer (each layer's program is then identical up to base addresses); ``rotate`` puts layer
``l``'s KV of a request on channel ``(c + l) mod C`` (the per-layer load balance is unchanged, the
capacity used per channel evens out over layers); ``auto`` is ``fixed`` when it fits, else
``rotate``.

Bank index convention (shared with the functional executor): bank ``b`` of a channel is
``(rank * bank_groups + bank_group) * banks_per_group + bank``; ``READRES``/``PIM_GEMV`` write
result ``b`` at element ``b`` of their destination.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field, fields

import numpy as np

from archsim.config import MachineConfig
from archsim.memory.addrmap import AddressMapping
from mapping.errors import CapacityError, MappingError, UnsupportedError
from mapping.kvlayout import PimKvLayout, StreamKvLayout, ceil_div

HBM_ALIGN = 1024
"""Alignment of linear HBM allocations (one page of the reference HBM2)."""
SPAD_ALIGN = 64
"""Alignment of scratchpad allocations (bytes)."""
DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}


# ---------------------------------------------------------------------------------- tensors
@dataclass(frozen=True)
class TensorPlacement:
    """A tensor in HBM.

    Attributes:
        name: identifier (``L3.qkv_w``, ``hidden.4`` ...).
        addr: byte address of element 0.
        shape: tensor shape (row-major axis order).
        dtype: element type (``fp16``/``bf16``/``fp32``).
        kind: ``weight``, ``activation`` or ``kv``.
        layout: ``row_major`` or ``tiled`` (2-D weights; see the module docstring).
        tile: ``(H, W)`` of a tiled tensor.
        size_bytes: bytes reserved.
    """

    name: str
    addr: int
    shape: tuple[int, ...]
    dtype: str
    kind: str
    layout: str = "row_major"
    tile: tuple[int, int] | None = None
    size_bytes: int = 0

    @property
    def elem_bytes(self) -> int:
        """Bytes per element."""
        return DTYPE_BYTES[self.dtype]

    @property
    def nbytes(self) -> int:
        """Bytes of the tensor's elements."""
        return int(np.prod(self.shape)) * self.elem_bytes

    def tile_offset(self, kb: int, nb: int) -> int:
        """Byte offset of tile ``(kb, nb)`` of a tiled ``[k, n]`` tensor."""
        k, n = self.shape
        H, W = self.tile  # type: ignore[misc]
        kh = min(H, k - kb * H)
        return (kb * H * n + kh * nb * W) * self.elem_bytes

    def to_image(self, values: np.ndarray) -> np.ndarray:
        """The tensor's elements in memory order (flat, ``prod(shape)`` values): what to write
        from ``addr`` upward. Row-major tensors: ``values.ravel()``; tiled: tile by tile.

        Raises:
            MappingError: ``values`` does not have the tensor's shape.
        """
        v = np.asarray(values)
        if v.shape != self.shape:
            raise MappingError(f"tensor '{self.name}': values of shape {v.shape}, expected "
                               f"{self.shape}")
        if self.layout == "row_major":
            return v.reshape(-1)
        off = (self.element_addresses() - self.addr) // self.elem_bytes
        out = np.empty(v.size, dtype=v.dtype)
        out[off.reshape(-1)] = v.reshape(-1)
        return out

    def element_addresses(self) -> np.ndarray:
        """Byte address of every element: int64 array of ``shape``.

        Used by validation to write weights/inputs into a memory image and read results back.
        """
        b = self.elem_bytes
        if self.layout == "row_major":
            return self.addr + np.arange(int(np.prod(self.shape)), dtype=np.int64).reshape(
                self.shape) * b
        k, n = self.shape
        H, W = self.tile  # type: ignore[misc]
        i = np.arange(k, dtype=np.int64)[:, None]
        j = np.arange(n, dtype=np.int64)[None, :]
        kb, nb = i // H, j // W
        wn = np.minimum(W, n - nb * W)
        kh = np.minimum(H, k - kb * H)
        off = kb * H * n + kh * nb * W + (i % H) * wn + (j % W)
        return self.addr + off * b


@dataclass(frozen=True)
class KvSegment:
    """Tokens ``[token0, token0 + tokens)`` of a request's K and V in one PIM channel.

    A request has one segment unless its KV was spilled (``kv_placement`` ``spill``, see
    :func:`place_kv_pim`); ``token0`` of every segment is a multiple of the layout's granule
    (:meth:`mapping.kvlayout.PimKvLayout.granule`), so a segment's rows start whole key and value
    rows and its local token ``t - token0`` uses the layout's arithmetic unchanged.

    Attributes:
        token0: first token (cache slot) of the segment; tokens: slots it holds.
        channel: PIM channel; key_row / value_row: its first key and value DRAM rows.
        rows: row groups it occupies.
    """

    token0: int
    tokens: int
    channel: int
    key_row: int
    value_row: int
    rows: int


@dataclass(frozen=True)
class KvPlacement:
    """Where one request's K and V of one layer live.

    Attributes:
        layer: layer index; request: position in the batch; request_id: the request's id.
        seq_len: tokens placed: the request's current sequence length ``L``, or with a sliding
            window ``W`` the ``min(L, W)`` slots of its rolling buffer (slot ``p mod W`` holds
            position ``p``; Jiang et al., "Mistral 7B", 2023, section 2).
        layout: ``pim`` or ``stream``.
        channel: PIM channel (``pim``) or -1.
        key_row: first DRAM row of the keys (``pim``); values follow at ``value_row``.
        value_row: first DRAM row of the values (``pim``).
        rows: row groups reserved (``pim``).
        addr: byte address of the allocation (``stream``), else -1.
        size_bytes: bytes reserved (row groups x row-group bytes for ``pim``).
        capacity: tokens the allocation has room for (``seq_len`` + reserve, at most ``W``);
            the streaming layout's K/V blocks are ``[capacity, head_dim]``.
        append_slot: slot this step's token (position ``L - 1``) is written to: ``L - 1``, or
            ``(L - 1) mod W`` in a rolling buffer; -1 (default) means ``seq_len - 1``.
        segments: where the slots live, in token order (:class:`KvSegment`; ``pim`` layout):
            one segment on ``channel`` from ``key_row`` unless the request was spilled over
            several channels; ``channel``, ``key_row`` and ``value_row`` are the first
            segment's.
    """

    layer: int
    request: int
    request_id: int
    seq_len: int
    layout: str
    channel: int
    key_row: int
    value_row: int
    rows: int
    addr: int
    size_bytes: int
    capacity: int = 0
    append_slot: int = -1
    segments: tuple[KvSegment, ...] = ()

    def __post_init__(self) -> None:
        if self.append_slot < 0:
            object.__setattr__(self, "append_slot", self.seq_len - 1)
        if not self.segments and self.layout == "pim":
            object.__setattr__(self, "segments", (KvSegment(
                0, max(self.capacity, self.seq_len), self.channel, self.key_row,
                self.value_row, self.rows),))

    @property
    def spilled(self) -> bool:
        """Whether the request's KV spans several channels."""
        return len(self.segments) > 1

    def segment_of(self, slot: int) -> KvSegment:
        """The segment holding cache slot ``slot``."""
        for seg in self.segments:
            if seg.token0 <= slot < seg.token0 + seg.tokens:
                return seg
        raise MappingError(f"request {self.request_id}: cache slot {slot} is outside its "
                           f"{self.capacity}-slot allocation")

    def block_bytes(self, head_dim: int, elem_bytes: int) -> int:
        """Bytes of one streaming K or V block of a KV head: capacity x head_dim x b."""
        return self.capacity * head_dim * elem_bytes


# ---------------------------------------------------------------------------------- HBM plan
@dataclass
class HbmPlan:
    """All HBM placements of a compilation (see the module docstring).

    Attributes:
        tensors: ``{name: TensorPlacement}`` of the linear region.
        kv: ``{(layer, request position): KvPlacement}``.
        linear_bytes: end of the linear region.
        kv_row0: first row of the PIM KV region (``rows`` when there is none).
        kv_rows_used: row groups used per channel, int array ``[channels]``.
        kv_placement: the resolved placement policy (``fixed``, ``rotate`` or ``spill``;
            ``stream``).
        kv_spilled: requests whose KV spans several channels (``spill``).
        pim_layout / stream_layout: the KV geometry in use.
    """

    cfg: MachineConfig
    amap: AddressMapping
    tensors: dict[str, TensorPlacement] = field(default_factory=dict)
    kv: dict[tuple[int, int], KvPlacement] = field(default_factory=dict)
    linear_bytes: int = 0
    kv_row0: int = 0
    kv_rows_used: np.ndarray | None = None
    kv_placement: str = "fixed"
    kv_spilled: int = 0
    pim_layout: PimKvLayout | None = None
    stream_layout: StreamKvLayout | None = None

    # -- linear region --
    def add_linear(self, name: str, shape: tuple[int, ...], dtype: str, kind: str,
                   layout: str = "row_major", tile: tuple[int, int] | None = None
                   ) -> TensorPlacement:
        """Bump-allocate a tensor in the linear region (aligned to :data:`HBM_ALIGN`)."""
        if name in self.tensors:
            raise MappingError(f"HBM plan: tensor '{name}' allocated twice")
        nbytes = int(np.prod(shape)) * DTYPE_BYTES[dtype]
        addr = self.linear_bytes
        size = ceil_div(max(nbytes, 1), HBM_ALIGN) * HBM_ALIGN
        t = TensorPlacement(name, addr, tuple(int(s) for s in shape), dtype, kind, layout, tile,
                            size)
        self.tensors[name] = t
        self.linear_bytes = addr + size
        return t

    # -- addresses of KV elements --
    def bank_fields(self) -> np.ndarray:
        """(ra, bg, ba) of bank index b = (ra*BG + bg)*BA + ba; int array ``[banks, 3]``."""
        org = self.cfg.memory.org
        b = np.arange(org.banks_per_channel)
        ba = b % org.banks_per_group
        bg = (b // org.banks_per_group) % org.bank_groups
        ra = b // (org.banks_per_group * org.bank_groups)
        return np.stack([ra, bg, ba], axis=1)

    def pim_address(self, channel, row, bank, elem) -> np.ndarray:
        """Byte address of element ``elem`` of DRAM ``row`` of ``bank`` in ``channel`` (PIM KV
        region; arguments broadcast as numpy arrays)."""
        lay = self.pim_layout
        assert lay is not None
        ch, row, bank, elem = np.broadcast_arrays(*(np.asarray(x, dtype=np.int64) for x in
                                                    (channel, row, bank, elem)))
        byte = elem * lay.elem_bytes
        cb = self.amap.column_bytes
        bf = self.bank_fields()[bank.reshape(-1)]
        fields = np.stack([ch.reshape(-1), bf[:, 0], bf[:, 1], bf[:, 2], row.reshape(-1),
                           (byte // cb).reshape(-1)], axis=1)
        return (self.amap.encode_array(fields) + (byte % cb).reshape(-1)).reshape(ch.shape)

    def pim_addr(self, channel: int, row: int, bank: int, elem: int) -> int:
        """Scalar :meth:`pim_address` (the compiler's hot path; no range checks)."""
        tab = self.__dict__.get("_addr_tab")
        if tab is None:
            sh = self.amap.shifts
            banks = [int(x) for x in self.pim_address(0, 0, np.arange(
                self.cfg.memory.org.banks_per_channel), 0)]
            tab = self.__dict__["_addr_tab"] = (sh["ch"], sh["ro"], sh["co"], banks,
                                                self.amap.column_bytes)
        s_ch, s_ro, s_co, banks, cb = tab
        byte = elem * self.pim_layout.elem_bytes  # type: ignore[union-attr]
        return ((channel << s_ch) | (row << s_ro) | banks[bank] | ((byte // cb) << s_co)) + \
            byte % cb

    def bank_stride(self) -> int | None:
        """Address distance between consecutive bank indices when it is constant, else None."""
        org = self.cfg.memory.org
        if org.banks_per_channel == 1:
            return 0
        a = self.pim_address(0, 0, np.arange(org.banks_per_channel), 0)
        d = np.diff(a)
        return int(d[0]) if (d == d[0]).all() else None

    def kv_element_addresses(self, layer: int, request: int) -> tuple[np.ndarray, np.ndarray]:
        """Byte addresses of request ``request``'s (batch position) K and V in ``layer``.

        Returns:
            ``(k_addr, v_addr)``, int64 arrays ``[seq_len, kv_heads, head_dim]`` (axis 0 token
            position, or rolling-buffer slot with a sliding window, axis 1 KV head, axis 2 head
            dimension).

        Raises:
            MappingError: no KV placed for that layer and request.
        """
        p = self.kv.get((layer, request))
        if p is None:
            raise MappingError(f"no KV placed for layer {layer}, request position {request}")
        L = p.seq_len
        if p.layout == "stream":
            sl = self.stream_layout
            assert sl is not None
            t = np.arange(L)[:, None, None]
            h = np.arange(sl.kv_heads)[None, :, None]
            d = np.arange(sl.head_dim)[None, None, :]
            blk = p.block_bytes(sl.head_dim, sl.elem_bytes)
            base = p.addr + (t * sl.head_dim + d) * sl.elem_bytes
            return base + h * blk, base + (sl.kv_heads + h) * blk
        lay = self.pim_layout
        assert lay is not None
        h = np.arange(lay.kv_heads)[None, :, None]
        d = np.arange(lay.head_dim)[None, None, :]
        ks, vs = [], []
        for seg in p.segments:
            n = min(L, seg.token0 + seg.tokens) - seg.token0
            if n <= 0:
                continue
            t = np.arange(n)[:, None, None]            # token within the segment
            g, b = t // lay.banks, t % lay.banks
            ks.append(self.pim_address(seg.channel, seg.key_row + lay.key_row(
                g, h // lay.heads_per_key_row), b, lay.key_col(g, h) + d))
            u, tt = t // lay.run, t % lay.run
            j, bb = d // lay.banks, d % lay.banks
            vs.append(self.pim_address(seg.channel, seg.value_row + lay.value_row(
                u, h // lay.slots, j), bb, lay.value_col(u, h) + tt))
        return np.concatenate(ks), np.concatenate(vs)

    def kv_footprint_per_channel(self) -> list[int]:
        """KV bytes reserved per channel (row groups x row-group bytes); empty without PIM."""
        if self.kv_rows_used is None or self.pim_layout is None:
            return []
        return [int(r) * self.pim_layout.row_group_bytes() for r in self.kv_rows_used]


def rows_slab_bytes(cfg: MachineConfig) -> int:
    """Bytes of address space per row index when the row is the most significant field:
    channels x banks x page bytes."""
    org = cfg.memory.org
    return org.channels * org.banks_per_channel * org.page_size_bytes


def _rolling(seq_lens: np.ndarray, reserve_tokens: int, window: int | None
              ) -> tuple[list[int], list[int], list[int]]:
    """Per request: cached tokens, room (tokens) and the slot of this step's token.

    Full attention: ``L``, ``L + reserve``, ``L - 1``; a sliding window ``W`` keeps a rolling
    buffer of ``min(L, W)`` slots with room for ``min(L + reserve, W)``, and position ``L - 1``
    goes to slot ``(L - 1) mod W``."""
    Ls = [int(L) for L in seq_lens]
    if window is None:
        return Ls, [L + reserve_tokens for L in Ls], [L - 1 for L in Ls]
    return ([min(L, window) for L in Ls], [min(L + reserve_tokens, window) for L in Ls],
            [(L - 1) % window for L in Ls])


def place_kv_pim(plan: HbmPlan, seq_lens: np.ndarray, request_ids: np.ndarray,
                 channels: np.ndarray, layers: list[int], policy: str = "auto",
                 reserve_tokens: int = 0, window: int | None = None) -> None:
    """Allocate the PIM KV region: per channel, row groups layer by layer, request by request.

    Policies (``policy``; ``auto`` takes the first that fits):

    * ``fixed`` — every request on its channel in every layer;
    * ``rotate`` — layer ``l``'s KV of a request on channel ``(c + l) mod C``;
    * ``spill`` — every request on its channel in every layer, except that the channels whose
      requests do not fit keep only the head of some requests and spill the tail to the
      channels with the most free rows (:func:`spill_segments`): a request then has several
      :class:`KvSegment`, the same in every layer, and its attention runs on each segment's
      channel, the parts merged on the NPU (:mod:`mapping.codegen.pim_attention`). The split
      is at whole rows of the layout, so spilling costs no row.

    Args:
        plan: the plan (its linear region must be final: KV rows start above it).
        seq_lens: int ``[n]`` tokens per request; request_ids: int ``[n]``; channels: int ``[n]``
            channel of each request (layer 0).
        layers: layer indices to place.
        policy: ``fixed``, ``rotate``, ``spill`` or ``auto``.
        reserve_tokens: extra tokens of room per request (for later decode steps).
        window: sliding window ``W`` of the model (``None``: full attention); a request then
            holds a rolling buffer of at most ``W`` slots (:class:`KvPlacement`).

    Raises:
        UnsupportedError: the address mapping's most significant field is not the row.
        CapacityError: ``fixed``/``rotate`` asked for and a channel's KV does not fit (names
            the channel, the bytes needed and available, the policy tried); with ``spill`` /
            ``auto``, only when the device's free KV rows cannot hold the batch: names the bytes
            needed and free on the device.
    """
    cfg, lay = plan.cfg, plan.pim_layout
    assert lay is not None
    org = cfg.memory.org
    if cfg.memory.controller.address_fields[0] != "ro":
        raise UnsupportedError(
            f"PIM KV placement needs the row as the most significant address field; "
            f"address_mapping '{cfg.memory.controller.address_mapping}' starts with "
            f"'{cfg.memory.controller.address_fields[0]}'")
    C = org.channels
    if (channels < 0).any() or (channels >= C).any():
        i = int(np.argmax((channels < 0) | (channels >= C)))
        raise MappingError(f"request position {i} (id {int(request_ids[i])}) has channel "
                           f"{int(channels[i])}, allowed 0..{C - 1}")
    slab = rows_slab_bytes(cfg)
    kv_row0 = ceil_div(plan.linear_bytes, slab)
    avail_rows = org.rows - kv_row0
    cached, room, slot = _rolling(seq_lens, reserve_tokens, window)
    rows_req = np.array([lay.rows(r) for r in room], dtype=np.int64)
    rgb = lay.row_group_bytes()

    def usage(rot: int) -> np.ndarray:
        used = np.zeros(C, dtype=np.int64)
        for l in layers:
            np.add.at(used, (channels + rot * l) % C, rows_req)
        return used

    tried = ["fixed", "rotate", "spill"] if policy == "auto" else [policy]
    if any(p not in KV_PLACEMENTS for p in tried):
        raise MappingError(f"kv_placement '{policy}' not one of {', '.join(KV_PLACEMENTS)}, "
                           "auto")
    used = None
    chosen = None
    for p in tried:
        if p == "spill":
            chosen = p
            break
        used = usage(0 if p == "fixed" else 1)
        if used.max() <= avail_rows:
            chosen = p
            break
    if chosen is None:
        assert used is not None
        c = int(np.argmax(used))
        raise CapacityError(
            f"KV cache does not fit channel {c}: needs {int(used[c]) * rgb} bytes "
            f"({int(used[c])} row groups for {len(layers)} layer(s)), available "
            f"{max(avail_rows, 0) * rgb} bytes ({max(avail_rows, 0)} row groups above the "
            f"{plan.linear_bytes}-byte weights/activations region); kv_placement tried: "
            f"{', '.join(tried)}", resource=f"KV rows of channel {c}",
            needed_bytes=int(used[c]) * rgb, available_bytes=max(avail_rows, 0) * rgb)
    if chosen == "spill":
        segs = spill_segments(lay, room, channels, C, max(avail_rows, 0) // len(layers),
                              len(layers), plan.linear_bytes)
    else:
        segs = [[(0, r, int(c))] for r, c in zip(room, channels)]
    rot = 1 if chosen == "rotate" else 0
    cursor = [kv_row0] * C
    # per request what every layer repeats: its segments' (token0, tokens, channel, key rows,
    # rows), row groups, id
    shapes = [[(t0, n, c, lay.key_rows(n), lay.rows(n)) for t0, n, c in sg] for sg in segs]
    n_rows = [sum(sh[4] for sh in shs) for shs in shapes]
    ids = [int(r) for r in request_ids]
    for l in layers:
        for i, shs in enumerate(shapes):
            parts = []
            for t0, n, c, key_rows, rows in shs:
                c = (c + rot * l) % C
                base = cursor[c]
                parts.append(_kv_segment(t0, n, c, base, base + key_rows, rows))
                cursor[c] = base + rows
            first = parts[0]
            plan.kv[(l, i)] = (_kv_placement if slot[i] >= 0 else KvPlacement)(
                l, i, ids[i], cached[i], "pim", first.channel, first.key_row, first.value_row,
                n_rows[i], -1, n_rows[i] * rgb, room[i], slot[i], tuple(parts))
    plan.kv_row0 = kv_row0
    plan.kv_rows_used = np.array(cursor, dtype=np.int64) - kv_row0
    plan.kv_placement = chosen
    plan.kv_spilled = sum(1 for sg in segs if len(sg) > 1)


def _frozen_maker(cls):
    """``make(*values)``: frozen dataclass ``cls`` from all its field values in order, as its
    constructor makes it when ``__post_init__`` changes nothing, the instance dictionary set at
    once, not field by field (tests/test_mapping_kvspill.py holds them equal)."""
    names = tuple(f.name for f in fields(cls))
    new = object.__new__

    def make(*values):
        obj = new(cls)
        obj.__dict__.update(zip(names, values, strict=True))
        return obj
    return make


_kv_segment = _frozen_maker(KvSegment)
_kv_placement = _frozen_maker(KvPlacement)

KV_PLACEMENTS = ("fixed", "rotate", "spill")
"""Values of ``CompileOptions.kv_placement`` besides ``auto`` (see :func:`place_kv_pim`)."""


def spill_segments(lay: PimKvLayout, room: list[int], channels: np.ndarray, n_channels: int,
                   cap_rows: int, n_layers: int, linear_bytes: int) -> list[list[tuple]]:
    """Split the requests of over-full channels so that every channel holds at most
    ``cap_rows`` row groups per layer.

    Every request starts whole on its channel. For each over-full channel, most loaded first,
    its requests, largest first, keep the longest head of whole granules
    (:meth:`mapping.kvlayout.PimKvLayout.granule` tokens) that leaves the channel within its
    rows, and the tail goes to the channel with the most free rows, as much of it as fits
    there, the rest to the next (a request's tokens stay in token order across its
    segments). A channel never receives more than it has free, so spilling ends when every
    channel fits; splits are at granule boundaries, so the row groups of the segments add up
    to those of the whole request.

    Args:
        lay: the PIM layout; room: tokens of room per request; channels: home channel per
            request; n_channels: channels; cap_rows: free row groups per channel and layer.
        n_layers, linear_bytes: for the error message.

    Returns:
        per request, its segments ``[(first token, tokens, channel), ...]`` in token order.

    Raises:
        CapacityError: the device's free rows (``cap_rows`` per channel and layer) cannot hold
            the batch; names the bytes needed and free on the device.
    """
    rgb = lay.row_group_bytes()
    rows = np.array([lay.rows(r) for r in room], dtype=np.int64)
    need, free_total = int(rows.sum()) * n_layers, cap_rows * n_channels * n_layers
    if need > free_total:
        raise CapacityError(
            f"KV cache does not fit the device: the batch needs {need * rgb} bytes ({need} row "
            f"groups of {rgb} bytes for {n_layers} layer(s), PIM layout), {free_total * rgb} "
            f"bytes are free ({cap_rows} row groups per channel and layer in {n_channels} "
            f"channels above the {linear_bytes}-byte weights/activations region)",
            resource="KV rows of the device", needed_bytes=need * rgb,
            available_bytes=free_total * rgb)
    gran = lay.granule()
    segs: list[list[list[int]]] = [[[0, int(r), int(c)]] for r, c in zip(room, channels)]
    load = np.bincount(channels, weights=rows, minlength=n_channels).astype(np.int64)
    for c in np.argsort(-load, kind="stable"):
        c = int(c)
        for i in sorted(np.flatnonzero(channels == c), key=lambda k: -rows[k]):
            if load[c] <= cap_rows:
                break
            head = segs[i][0]                     # the part on its home channel
            keep = head[1] // gran * gran
            while keep > 0 and load[c] - lay.rows(head[1]) + lay.rows(keep) > cap_rows:
                keep -= gran
            tail0, tail = keep, head[1] - keep
            load[c] -= lay.rows(head[1]) - lay.rows(keep)
            moved: list[list[int]] = [[0, keep, c]] if keep else []
            while tail > 0:
                d = int(np.argmax(cap_rows - load))
                spare = int(cap_rows - load[d])
                n = tail if lay.rows(tail) <= spare else spare_tokens(lay, spare)
                if n <= 0:            # no channel has a whole granule free: rows are spread
                    raise CapacityError(
                        f"KV cache does not fit the device: request position {i} needs "
                        f"{lay.rows(tail) * rgb} more bytes per layer and no channel has "
                        f"{lay.rows(min(tail, gran)) * rgb} bytes free per layer (the free "
                        f"rows are split over the channels)", resource="KV rows of the device",
                        needed_bytes=need * rgb, available_bytes=free_total * rgb)
                moved.append([tail0, n, d])
                load[d] += lay.rows(n)
                tail0, tail = tail0 + n, tail - n
            segs[i] = moved
    return [[(t0, n, ch) for t0, n, ch in sg] for sg in segs]


def spare_tokens(lay: PimKvLayout, spare_rows: int) -> int:
    """Most whole granules of tokens whose rows fit ``spare_rows`` row groups."""
    gran = lay.granule()
    per = lay.rows(gran)
    return spare_rows // per * gran if per else 0


def place_kv_stream(plan: HbmPlan, seq_lens: np.ndarray, request_ids: np.ndarray,
                    layers: list[int], reserve_tokens: int = 0,
                    window: int | None = None) -> None:
    """Allocate the streaming KV cache (NPU-only) in the linear region as one tensor ``kv``,
    layer by layer, request by request (each request: K blocks then V blocks of its KV heads;
    with a sliding ``window``, rolling buffers of at most ``W`` slots as in
    :func:`place_kv_pim`).

    Raises:
        CapacityError: the device is too small (bytes needed and available).
    """
    sl = plan.stream_layout
    assert sl is not None
    cached, room, slot = _rolling(seq_lens, reserve_tokens, window)
    sizes = [ceil_div(sl.bytes(r), HBM_ALIGN) * HBM_ALIGN for r in room]
    total = sum(sizes) * len(layers)
    dtype = "fp32" if sl.elem_bytes == 4 else "fp16"
    t = plan.add_linear("kv", (max(total // sl.elem_bytes, 1),), dtype, "kv")
    off = t.addr
    for l in layers:
        for i in range(seq_lens.shape[0]):
            plan.kv[(l, i)] = KvPlacement(l, i, int(request_ids[i]), cached[i], "stream", -1, -1,
                                          -1, 0, off, sizes[i], room[i], slot[i])
            off += sizes[i]
    plan.kv_placement = "stream"
    plan.kv_row0 = plan.cfg.memory.org.rows
    check_linear_capacity(plan)


def check_linear_capacity(plan: HbmPlan) -> None:
    """Raise CapacityError when the linear region exceeds the device.

    The message gives the bytes needed and the device capacity.
    """
    cap = plan.cfg.memory.org.capacity_bytes
    if plan.linear_bytes > cap:
        raise CapacityError(f"HBM: weights, activations and KV need {plan.linear_bytes} bytes, "
                            f"the device has {cap} bytes ({plan.cfg.memory.org.channels} channels"
                            f" x {plan.cfg.memory.org.channel_capacity_bytes} bytes)",
                            resource="HBM", needed_bytes=int(plan.linear_bytes),
                            available_bytes=int(cap))


# ---------------------------------------------------------------------------------- scratchpad
class SpadAllocator:
    """First-fit scratchpad allocator that remembers, per freed block, the events after which
    it may be overwritten (write-after-read/write hazards across engine streams), and which
    *owner* (sub-batch) freed it.

    ``alloc`` returns the address and the release events of the freed blocks it reuses; the
    caller makes the first writer wait for them. ``free`` records the events of the block's last
    accesses. Adjacent free blocks of the same owner merge (their events are united).

    Owner preference: a buffer of owner ``o`` is placed first-fit in memory that is unused or
    was freed by ``o``; only when no such range is large enough does it take memory freed by
    another owner. Without it, memory freed a moment ago by one sub-batch went to the next
    buffer of the other sub-batch, whose first writer then waited for the first sub-batch's
    readers: a false dependency that serialised sub-batch interleaving. Space is found whenever
    plain first-fit would find it. Events are ``{stream: position}`` dicts (see
    :mod:`mapping.builder`).
    """

    _UNUSED = "unused"

    def __init__(self, size_bytes: int) -> None:
        self.size = int(size_bytes)
        # blocks: sorted starts; each [start, end, free, events, owner it was allocated for]
        self._starts: list[int] = [0]
        self._segs: dict[int, list] = {0: [0, self.size, True, {}, self._UNUSED]}
        self.peak_bytes = 0
        self.used_bytes = 0

    def alloc(self, nbytes: int, what: str = "buffer",
              owner: int | None = None) -> tuple[int, dict[str, int]]:
        """Reserve ``nbytes`` (rounded up to :data:`SPAD_ALIGN`) for ``owner`` (e.g. a
        sub-batch index; None: no preference).

        Returns:
            ``(address, release_events)``: the union of the events of the freed blocks reused.

        Raises:
            CapacityError: no free range is large enough (names the buffer, the bytes needed,
                the largest free range and the capacity).
        """
        n = ceil_div(max(int(nbytes), 1), SPAD_ALIGN) * SPAD_ALIGN
        starts, segs = self._starts, self._segs
        largest = 0
        passes = ((self._UNUSED, owner), None) if owner is not None else (None,)
        for ok in passes:
            run0, run = -1, 0
            for k in range(len(starts)):
                seg = segs[starts[k]]
                if not seg[2] or (ok is not None and seg[4] not in ok):
                    run0, run = -1, 0
                    continue
                if run0 < 0:
                    run0, run = k, 0
                run += seg[1] - seg[0]
                largest = max(largest, run)
                if run >= n:
                    return self._take(run0, k, n, owner)
        raise CapacityError(f"scratchpad: {what} needs {n} bytes, largest free range is "
                            f"{largest} bytes of {self.size} bytes ({self.used_bytes} in use)",
                            resource="scratchpad", needed_bytes=n, available_bytes=largest)

    def _take(self, k0: int, k1: int, n: int,
              owner: int | None) -> tuple[int, dict[str, int]]:
        """Allocate ``n`` bytes for ``owner`` from the adjacent free blocks ``k0..k1``."""
        starts, segs = self._starts, self._segs
        addr = starts[k0]
        events: dict[str, int] = {}
        for k in range(k0, k1 + 1):
            _merge_events(events, segs[starts[k]][3])
        last = segs[starts[k1]]
        end = addr + n
        for k in range(k0 + 1, k1 + 1):
            del segs[starts[k]]
        del starts[k0 + 1:k1 + 1]
        if last[1] > end:   # the rest of the last block stays free, with its events and owner
            segs[end] = [end, last[1], True, dict(last[3]), last[4]]
            starts.insert(k0 + 1, end)
        segs[addr] = [addr, end, False, {}, owner]
        self.used_bytes += n
        self.peak_bytes = max(self.peak_bytes, self.used_bytes)
        return addr, events

    def free(self, addr: int, events: dict[str, int]) -> None:
        """Release the block at ``addr`` (it keeps the owner it was allocated for); it may be
        reused after ``events`` complete."""
        seg = self._segs.get(addr)
        if seg is None or seg[2]:
            raise MappingError(f"scratchpad: free of unallocated address {addr}")
        seg[2] = True
        seg[3] = dict(events)
        owner = seg[4]
        self.used_bytes -= seg[1] - seg[0]
        starts, segs = self._starts, self._segs
        i = bisect.bisect_left(starts, addr)
        if i + 1 < len(starts):                       # merge with the next block
            nxt = segs[starts[i + 1]]
            if nxt[2] and nxt[4] == owner:
                seg[1] = nxt[1]
                _merge_events(seg[3], nxt[3])
                del segs[starts[i + 1]]
                del starts[i + 1]
        if i > 0:                                     # merge with the previous block
            prv = segs[starts[i - 1]]
            if prv[2] and prv[4] == owner:
                prv[1] = seg[1]
                _merge_events(prv[3], seg[3])
                del segs[addr]
                del starts[i]


def _merge_events(into: dict[str, int], other: dict[str, int]) -> None:
    for k, v in other.items():
        if into.get(k, -1) < v:
            into[k] = v


def add_layer_weights(plan: HbmPlan, model, tp: int, l: int, dtype: str, tile,
                      ep: int = 1) -> None:
    """Place layer ``l``'s weights (norms, QKV, projection, FFN or the experts local to device 0
    of ``ep``; biases when the model has them) in ``plan`` for tensor parallelism ``tp``:
    matrices tiled in ``tile`` = (array height, width) blocks, ``dtype`` elements."""
    d = model.d_model
    Hq, Hkv, hd = model.heads_per_device(tp), model.kv_heads_per_device(tp), model.head_dim
    ff = model.d_ff_per_device(tp)
    N = (Hq + 2 * Hkv) * hd
    p = f"L{l}."
    nrm = 2 if model.norm == "layernorm" else 1
    plan.add_linear(p + "attn_norm", (nrm, d), dtype, "weight")
    plan.add_linear(p + "qkv_w", (d, N), dtype, "weight", "tiled", tile)
    if model.attention_bias:
        plan.add_linear(p + "qkv_b", (N,), dtype, "weight")
    plan.add_linear(p + "proj_w", (Hq * hd, d), dtype, "weight", "tiled", tile)
    if model.proj_bias:
        plan.add_linear(p + "proj_b", (d,), dtype, "weight")
    plan.add_linear(p + "ffn_norm", (nrm, d), dtype, "weight")
    if model.n_experts is not None:
        plan.add_linear(p + "moe_router_w", (d, model.n_experts), dtype, "weight", "tiled", tile)
        for e in model.local_experts(ep):
            q = f"{p}e{e}."
            plan.add_linear(q + "gate_w", (d, ff), dtype, "weight", "tiled", tile)
            plan.add_linear(q + "up_w", (d, ff), dtype, "weight", "tiled", tile)
            plan.add_linear(q + "down_w", (ff, d), dtype, "weight", "tiled", tile)
        return
    if model.activation == "swiglu":
        plan.add_linear(p + "ffn_gate_w", (d, ff), dtype, "weight", "tiled", tile)
        if model.mlp_bias:
            plan.add_linear(p + "ffn_gate_b", (ff,), dtype, "weight")
    plan.add_linear(p + "ffn1_w", (d, ff), dtype, "weight", "tiled", tile)
    if model.mlp_bias:
        plan.add_linear(p + "ffn1_b", (ff,), dtype, "weight")
    plan.add_linear(p + "ffn2_w", (ff, d), dtype, "weight", "tiled", tile)
    if model.mlp_bias:
        plan.add_linear(p + "ffn2_b", (d,), dtype, "weight")


__all__ = ["add_layer_weights", "TensorPlacement", "KvPlacement", "KvSegment", "KV_PLACEMENTS",
           "spill_segments",
           "HbmPlan", "SpadAllocator", "place_kv_pim",
           "place_kv_stream", "check_linear_capacity", "rows_slab_bytes", "HBM_ALIGN",
           "SPAD_ALIGN", "DTYPE_BYTES"]
