"""The buffer plan: how the compiler divides the scratchpad it is given.

The scratchpad (``npu.scratchpad.size_bytes``) holds, at once, the GEMM chain of a row block
(activations, fp32 accumulators, a ring of weight tiles per systolic array) and the attention's
buffers (per PIM channel or NPU lane: two pipeline slots of scores, staged probabilities and
partial sums, sized for one key block). Four numbers decide how much each gets; they are chosen
per compilation from the scratchpad size and the batch, reported in the compiled program
(``CompiledProgram.buffer_plan``), in ``archsim compile``'s ``summary.json`` and in the run
JSON (``extra.buffer_plan``):

* ``attn_block_tokens`` — tokens of one attention key block. A request with more cached tokens
  is attended block by block and the blocks merged with their log-sum-exps
  (:mod:`mapping.codegen.pim_attention`), so the scratchpad attention needs is bounded by the
  block, not by the context. When the longest request's buffers take at most
  :data:`ATTN_SHARE` of the scratchpad it is one block (no merge); else the largest multiple
  of :func:`block_granule` within that share, capped by the ISA's 16-bit softmax/copy fields
  (:func:`max_block_tokens`). Decode attention on PIM is also capped at
  :data:`PIM_BLOCK_TOKENS` for speed (finer interleaving of the channels an attention vector
  unit serves).
* ``row_block`` — token rows per GEMM-chain block: the whole sub-batch when it fits, else the
  fewest equal blocks that fit (every block streams the layer's weights once more).
* ``weight_buffers`` — weight-tile buffers per systolic array (:func:`ring_depth`): at least
  :data:`RING_MIN` (5: deep enough that a preload-bound tile never waits on the reference
  128 x 128 array, :func:`archsim.npu.timing.weight_ring_slots`), deeper as the scratchpad
  allows (:data:`RING_SHARE` of it, at most :data:`RING_MAX`: the weight DMA then runs further
  ahead of the arrays and rides out the memory's busy spells); fewer (down to 2) only when a
  row block of one row does not fit with :data:`RING_MIN`. ``CompileOptions.weight_buffers``
  fixes the depth instead.

When the three do not fit together, GEMM rows come first (the smallest attention block while
the row block is searched), then the attention block grows into what is left
(:func:`search_buffer_plan`): an extra row block costs a whole weight stream, a smaller key
block a few vector instructions.
* ``attention_bytes`` / ``gemm_bytes`` — the scratchpad the attention buffers and the rest
  (GEMM chain, parameters) reached; ``peak_bytes`` their sum at the peak.

Sizes of the attention buffers are computed here, once, and used both to choose the plan and
by the code generator to allocate (:func:`pim_slot_bytes`, :func:`npu_lane_bytes`,
:func:`merge_bytes`, :func:`prefill_lane_bytes`).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from mapping.kvlayout import PimKvLayout, ceil_div, default_value_run

RING_MIN = 5
"""Weight-tile buffers per array the compiler keeps at least (when a GEMM row fits beside
them): :func:`archsim.npu.timing.weight_ring_slots` asks at most 5 on a 128 x 128 array for any
tile height (``tests/test_npu_timing.py`` checks it; the compiler counts no cycle)."""
RING_MAX = 24
"""Deepest weight ring the buffer plan builds. Measured on the GPT3-7B clb-0 layer (neupims,
batch 512, 64 MiB scratchpad): 542,125 NPU cycles with 5 tiles per array, 537,057 with 8,
533,609 with 12, 524,752 with 16, 520,182 with 24, 518,993 with 32 (0.2 % for the last 8)."""
RING_SHARE = 0.125
"""Share of the scratchpad the weight ring may take beyond :data:`RING_MIN` tiles per array:
16 tiles per array on the reference 32 MiB (4 MiB of 256 KiB rings), 24 from 48 MiB."""
PIM_BLOCK_TOKENS = 512
"""Longest key block of decode attention on PIM (rounded down to whole rows, at least one
granule), whatever the scratchpad holds: each attention vector unit serves several channels in
program order, and a long block's softmax holds the unit until that channel's whole q.K is
done, stalling the other channels' PIM (head-of-line blocking); blocks of a few hundred tokens
interleave the channels finely. GPT3-7B clb-0 layer (neupims, 32 MiB, 16 weight tiles per
array): 524,752 NPU cycles with each request in one block (up to 2,048 tokens), 477,902 with
blocks of 512, 475,113 with blocks of 128 (a merge per block costs a few vector
instructions)."""
ATTN_SHARE = 0.5
"""Largest share of the scratchpad the decode attention buffers may take when they must be
blocked (the rest is the GEMM chain's; prefill attention lanes use the same share)."""
FIELD16_MAX = (1 << 16) - 1
"""Largest value of the ISA's 16-bit row/column/stride/length fields (elements)."""
DMA_ROWS_MAX = (1 << 14) - 1
"""Largest ``rows`` of one DMA (14-bit field)."""


@dataclass(frozen=True)
class BufferPlan:
    """The chosen division of the scratchpad (module docstring).

    Attributes:
        scratchpad_bytes: the scratchpad configured.
        attn_block_tokens: tokens per attention key block (a request longer than this is
            attended in blocks); ``max_attn_tokens`` the longest request's cached tokens.
        attn_blocks_max: key blocks of the longest request (1: no request is blocked).
        row_block: token rows per GEMM-chain block; ``rows_max`` the largest sub-batch's rows.
        weight_buffers: weight-tile buffers per systolic array.
        attention_bytes: scratchpad bytes of the attention buffers (slots, merge buffers,
            prefill lanes) at the end of the compilation.
        peak_bytes: highest scratchpad use.
        qkv_staged: decode q|k|v go through HBM between the QKV GEMM and the attention
            (:func:`search_buffer_plan`); False: they stay in the scratchpad.
    """

    scratchpad_bytes: int
    attn_block_tokens: int
    max_attn_tokens: int
    attn_blocks_max: int
    row_block: int
    rows_max: int
    weight_buffers: int
    attention_bytes: int = 0
    peak_bytes: int = 0
    qkv_staged: bool = False

    def to_dict(self) -> dict:
        """JSON form (every attribute)."""
        return asdict(self)

    def describe(self) -> str:
        """One line for the run output: ``attention blocks of 4,096 tokens (3 per request at
        most), GEMM row blocks of 256 of 256 rows, 5 weight tiles per array; 14.2 of 32.0 MiB``."""
        mib = 1 << 20
        att = (f"attention in one block per request (up to {self.max_attn_tokens:,} tokens)"
               if self.attn_blocks_max <= 1 else
               f"attention blocks of {self.attn_block_tokens:,} tokens ({self.attn_blocks_max} "
               f"per request at most)")
        return (f"{att}, GEMM row blocks of {self.row_block:,} of {self.rows_max:,} rows, "
                f"{self.weight_buffers} weight tiles per array"
                f"{', q|k|v through HBM' if self.qkv_staged else ''}; peak "
                f"{self.peak_bytes / mib:.1f} of {self.scratchpad_bytes / mib:.1f} MiB")


# ------------------------------------------------------------------------------ sizes
def pim_slot_bytes(lay: PimKvLayout, unit_heads: int, tokens: int, lse: bool) -> dict[str, int]:
    """Bytes of one PIM attention slot for key blocks of up to ``tokens`` tokens and units of
    ``unit_heads`` KV heads: ``sc`` fp32 scores ``[rows, scores_cols]`` (+ the rows'
    log-sum-exp when ``lse``), ``st`` staged vectors for GWRITE (pages), ``part`` fp32 p.V
    partials ``[runs, rows, dim_tiles * banks]`` (+ the log-sum-exp)."""
    rows = unit_heads * lay.q_per_kv
    lp = lay.scores_cols(tokens)
    U = lay.runs(tokens)
    n_stage = max(ceil_div(unit_heads, lay.heads_per_key_row) + 1,
                  U * (ceil_div(unit_heads, lay.slots) + 1)) * lay.q_per_kv
    extra = rows * 4 if lse else 0
    return {"sc": rows * lp * 4 + extra, "st": n_stage * lay.page_elems * lay.elem_bytes,
            "part": U * rows * lay.dim_tiles * lay.banks * 4 + extra}


def merge_bytes(rows: int, cols: int) -> int:
    """Bytes of the running-output buffers of one blocked attention unit of ``rows`` query
    rows and ``cols`` fp32 outputs per row: ``[rows, 2, cols]`` outputs, ``[rows, 2]``
    log-sum-exps, ``[rows, 2]`` weights and ``[rows]`` merged log-sum-exp."""
    return rows * 2 * cols * 4 + rows * 8 + rows * 12


def npu_lane_bytes(heads: int, head_dim: int, elem_bytes: int, run: int, tokens: int,
                   lse: bool) -> dict[str, int]:
    """Bytes of one NPU attention lane (systems without PIM) for key blocks of up to
    ``tokens`` tokens: per slot (two) ``sc`` fp32 scores ``[heads, tokens]`` (+ log-sum-exp),
    ``p`` probabilities in the model dtype, ``out`` fp32 run partials ``[runs, heads,
    head_dim]`` (+ log-sum-exp); ``kvblk`` one of two K/V block buffers ``[tokens,
    head_dim]``."""
    extra = heads * 4 if lse else 0
    return {"sc": heads * tokens * 4 + extra, "p": heads * tokens * elem_bytes,
            "out": ceil_div(tokens, run) * heads * head_dim * 4 + extra,
            "kvblk": tokens * head_dim * elem_bytes}


def npu_lane_total(sizes: dict[str, int]) -> int:
    """Scratchpad bytes of one NPU attention lane from :func:`npu_lane_bytes`: two slots and
    two K/V block buffers."""
    return 2 * (sizes["sc"] + sizes["p"] + sizes["out"] + sizes["kvblk"])


def prefill_lane_bytes(tokens: int, keys: int, q_tile: int, head_dim: int, elem_bytes: int,
                       H: int, W: int, lse: bool, q_per_kv: int = 1) -> dict[str, int]:
    """Bytes of the buffers one prefill attention lane holds for prompts of up to ``tokens``
    tokens attended in key blocks of ``keys`` tokens, query tiles of ``q_tile`` rows, on
    ``H x W`` arrays (in allocation order): ``v`` V block ``[keys, head_dim]``, ``ktile`` K^T
    tiles, ``q`` query tile, ``sblk`` score tiles, ``srow`` scores ``[q, keys]`` fp32 (+ the
    rows' log-sum-exp when blocked, ``lse``), ``pblk`` probability blocks, ``o`` fp32
    output, ``otile`` the output in the model dtype; when blocked, ``merge`` the running outputs
    of the ``q_per_kv`` query heads of a KV head (:func:`merge_bytes` each)."""
    mq = min(tokens, q_tile)
    nb, kb = ceil_div(keys, W), ceil_div(keys, H)
    out = {"v": keys * head_dim * elem_bytes, "ktile": nb * head_dim * W * elem_bytes,
           "q": mq * head_dim * elem_bytes, "sblk": nb * mq * W * 4,
           "srow": mq * keys * 4 + (mq * 4 if lse else 0),
           "pblk": kb * mq * H * elem_bytes, "o": mq * head_dim * 4,
           "otile": mq * head_dim * elem_bytes}
    if lse:
        out["merge"] = q_per_kv * merge_bytes(mq, head_dim)
    return out


def prefill_unit_bytes(keys: int, head_dim: int, elem_bytes: int,
                       lay: PimKvLayout | None) -> int:
    """Scratchpad bytes a prefill attention unit allocates beside its lane for a key block of
    ``keys`` tokens, at most at once: the K block ``[keys, head_dim]`` being transposed, or (PIM
    layout) the transposed V block and its packed runs for the KV append."""
    k = keys * head_dim * elem_bytes
    if lay is None:
        return k
    return max(k, head_dim * keys * elem_bytes
               + lay.runs(keys) * lay.dim_tiles * lay.banks * lay.run * elem_bytes)


# ------------------------------------------------------------------------------ blocks
def block_granule(lay: PimKvLayout | None, value_run: int) -> int:
    """Key blocks are multiples of this many tokens: whole key and value rows (PIM layout,
    :meth:`mapping.kvlayout.PimKvLayout.granule`: a token group, value run or packed row never
    straddles two blocks), or the value run (streaming layout: p.V runs)."""
    if lay is None:
        return value_run
    return lay.granule()


def max_block_tokens(granule: int, q_per_kv: int, npu: bool) -> int:
    """Longest key block the ISA's fields can express: a softmax row and its ``len`` (16 bits),
    the probability gathers' source stride ``q_per_kv x block`` (PIM, 16 bits), a K/V block
    DMA of ``block`` rows (NPU, 14 bits); rounded down to the granule."""
    cap = FIELD16_MAX if npu else FIELD16_MAX // max(q_per_kv, 1)
    if npu:
        cap = min(cap, DMA_ROWS_MAX)
    return max(granule, cap // granule * granule)


def choose_block(longest: int, granule: int, cap: int, fits) -> int:
    """The attention block: ``longest`` (one block) when it is within ``cap`` and
    ``fits(longest)``, else the largest multiple of ``granule`` up to ``cap`` that ``fits``
    (a predicate on the block's tokens, monotone: smaller blocks need less), else
    ``granule`` (the caller's allocation then reports the scratchpad that is missing)."""
    if longest <= cap and fits(longest):
        return longest
    lo, hi = 1, max(1, min(cap, longest) // granule)     # in granules
    best = 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid * granule):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best * granule


__all__ = ["BufferPlan", "ATTN_SHARE", "pim_slot_bytes", "merge_bytes", "npu_lane_bytes",
           "npu_lane_total", "prefill_lane_bytes", "prefill_unit_bytes", "block_granule", "max_block_tokens",
           "choose_block", "FIELD16_MAX", "DMA_ROWS_MAX"]


def ring_depth(scratchpad_bytes: int, ring_tile_bytes: int, fixed: int | None = None) -> int:
    """Weight-tile buffers per array the plan starts from: ``fixed`` when given
    (``CompileOptions.weight_buffers``), else as many as :data:`RING_SHARE` of the scratchpad
    holds, ``ring_tile_bytes`` being one tile for every array (``n_arrays x H x W x dtype``),
    between :data:`RING_MIN` and :data:`RING_MAX`."""
    if fixed is not None:
        return fixed
    return max(RING_MIN, min(RING_MAX, int(RING_SHARE * scratchpad_bytes) // ring_tile_bytes))


def attention_pieces(kp, block: int) -> list[tuple]:
    """The pieces PIM attention of one request runs as, in token order: ``(segment, first
    token in the segment, tokens)`` for each key block of ``block`` tokens of each of its KV
    segments (:class:`mapping.memplan.KvSegment`; one segment unless spilled) over its
    ``kp.seq_len`` cached tokens. One piece: attended whole, no merge."""
    out = []
    for seg in kp.segments:
        n = min(kp.seq_len, seg.token0 + seg.tokens) - seg.token0
        out.extend((seg, t, min(block, n - t)) for t in range(0, max(n, 0), block))
    return out


def unit_heads(lay: PimKvLayout, kv_heads: int) -> int:
    """KV heads of one PIM attention *unit*: a union of whole key row chunks and whole value
    groups (lcm of the two, at most all KV heads). A request's attention is done unit by unit,
    so the per-channel buffers scale with the unit, not with all heads."""
    return min(kv_heads, math.lcm(lay.heads_per_key_row, lay.slots))


def _aligned(n: int) -> int:
    from mapping.memplan import SPAD_ALIGN
    return ceil_div(n, SPAD_ALIGN) * SPAD_ALIGN


def attention_block(*, scratchpad_bytes: int, phase: str, lay: PimKvLayout | None,
                    longest_by_key: dict[int, int], heads: int, kv_heads: int, head_dim: int,
                    elem_bytes: int, value_run: int, lanes: int, q_tile: int, H: int,
                    W: int, share: float | None = None) -> tuple[int, int]:
    """The attention key block (tokens) of a compilation (module docstring).

    Args:
        scratchpad_bytes: the scratchpad.
        phase: ``decode`` or ``prefill``.
        lay: the PIM KV layout (decode attention on PIM; prefill with the KV cache in the PIM
            layout) or None (attention on the NPU with streaming KV).
        longest_by_key: decode on PIM: per channel, ``(tokens, spilled)`` of its longest KV
            segment (cached tokens) and whether any request there spans several channels; on
            the NPU and in prefill: ``{0: (longest request, False)}``.
        heads, kv_heads, head_dim, elem_bytes: the model shard on the device.
        value_run: tokens per p.V run; lanes: NPU attention lanes (vector units) of decode.
        q_tile: query rows per prefill tile; H, W: systolic array height and width.
        share: of the scratchpad (default :data:`ATTN_SHARE`).

    Returns:
        ``(block, granule)``: the block (tokens) is the longest request when its buffers take
        at most ``share`` of the scratchpad, else the largest multiple of the granule (the
        tokens blocks are multiples of) that does, at least one granule.
    """
    budget = (ATTN_SHARE if share is None else share) * scratchpad_bytes
    longest = max((t for t, _ in longest_by_key.values()), default=1)
    if phase == "prefill":
        gran = math.lcm(q_tile, H, W, value_run if lay is None else block_granule(lay, 0))
        cap = DMA_ROWS_MAX // gran * gran        # a K or V block is one DMA of its rows

        def fits(t: int) -> bool:
            keys = min(t, longest)
            sizes = prefill_lane_bytes(longest, keys, q_tile, head_dim, elem_bytes, H, W,
                                       t < longest, heads // kv_heads)
            return (sum(_aligned(v) for v in sizes.values())
                    + _aligned(prefill_unit_bytes(keys, head_dim, elem_bytes, lay)) <= budget)
        return choose_block(longest, gran, max(gran, cap), fits), gran
    if lay is None:
        gran = block_granule(None, value_run)
        cap = max_block_tokens(gran, heads // kv_heads, True)

        def fits(t: int) -> bool:
            sizes = npu_lane_bytes(heads, head_dim, elem_bytes, value_run, min(t, longest),
                                   t < longest)
            per = 2 * sum(_aligned(sizes[k]) for k in ("sc", "p", "out", "kvblk"))
            if t < longest:
                per += _aligned(merge_bytes(heads, head_dim))
            return lanes * per <= budget
        return choose_block(longest, gran, cap, fits), gran
    gran = block_granule(lay, value_run)
    cap = min(max_block_tokens(gran, lay.q_per_kv, False),
              max(gran, PIM_BLOCK_TOKENS // gran * gran))
    uh = unit_heads(lay, kv_heads)
    rows, dkp = uh * lay.q_per_kv, lay.dim_tiles * lay.banks

    def fits(t: int) -> bool:
        tot = 0
        for L, spilled in longest_by_key.values():
            blocked = t < L or spilled
            tot += 2 * sum(_aligned(v) for v in pim_slot_bytes(lay, uh, min(t, L),
                                                               blocked).values())
            if blocked:
                tot += _aligned(merge_bytes(rows, dkp))
        return tot <= budget
    return choose_block(longest, gran, cap, fits), gran


def layer_attention_block(cfg, plan, model, tp: int, layers: list[int], phase: str,
                          on_pim: bool, eb: int, value_run: int | None,
                          q_tile: int) -> tuple[int, int]:
    """The attention key block of the buffer plan when everything fits, and its granule
    (:func:`attention_block`), from the compiled layers' KV placements.

    Args:
        cfg: the machine (:class:`archsim.config.MachineConfig`); plan: the HBM plan with the
            KV cache placed (:class:`mapping.memplan.HbmPlan`); model: the model
            (:class:`workloads.models.ModelSpec`); tp: tensor-parallel degree.
        layers: the compiled layers; phase: ``decode``, ``prefill`` or ``mixed`` (decode
            steps and prompt chunks: the smaller of the two blocks); on_pim: decode
            attention runs on PIM; eb: bytes per element; value_run: the compile option
            (None: the layout's or the default run); q_tile: prefill query rows per tile.
    """
    if phase == "mixed":    # decode steps and prompt chunks share the block: the smaller
        d = layer_attention_block(cfg, plan, model, tp, layers, "decode", on_pim, eb,
                                  value_run, q_tile)
        p = layer_attention_block(cfg, plan, model, tp, layers, "prefill", on_pim, eb,
                                  value_run, q_tile)
        return min(d[0], p[0]), p[1]     # the prefill granule is a multiple of decode's
    npu = cfg.npu
    lay = plan.pim_layout if (on_pim or phase == "prefill") else None
    longest: dict[int, tuple[int, bool]] = {}
    for (l, _), p in plan.kv.items():
        if l not in layers:
            continue
        if lay is None or phase != "decode":
            longest[0] = (max(longest.get(0, (0, False))[0], p.seq_len), False)
            continue
        for seg in p.segments:
            n = min(p.seq_len, seg.token0 + seg.tokens) - seg.token0
            t, sp = longest.get(seg.channel, (0, False))
            longest[seg.channel] = (max(t, n), sp or p.spilled)
    run = (plan.pim_layout.run if plan.pim_layout is not None else value_run or
           default_value_run(cfg.memory.org.page_size_bytes // eb, cfg.pim.multipliers_per_bank,
                             cfg.pim.gemv_pipeline_fill))
    V = npu.vector.count
    return attention_block(
        scratchpad_bytes=npu.scratchpad.size_bytes, phase=phase, lay=lay,
        longest_by_key=longest, heads=model.heads_per_device(tp),
        kv_heads=model.kv_heads_per_device(tp), head_dim=model.head_dim, elem_bytes=eb,
        value_run=run, lanes=max(1, V - V // 2) if V >= 2 else 1, q_tile=q_tile,
        H=npu.array_height, W=npu.array_width)


__all__ += ["unit_heads", "attention_block", "attention_pieces", "layer_attention_block"]


def search_buffer_plan(attempt, rows_max: int, ring: int, scratchpad_bytes: int,
                       attn_full: int, attn_min: int, granule: int, can_stage: bool = False,
                       largest_first: bool = False):
    """The GEMM row block, the weight ring, the attention key block and where decode keeps
    q|k|v: generate the code with ``attempt(row_block, ring, attn_block, staged)`` (returns
    the result, or the scratchpad :class:`mapping.errors.CapacityError` when the buffers do not
    fit; attempts share no mutable state) until it fits.

    1. The whole sub-batch, the ring ``ring`` (:func:`ring_depth`), the attention block
       ``attn_full`` (:func:`attention_block`: one block per request when that fits in
       :data:`ATTN_SHARE` of the scratchpad) and q|k|v in the scratchpad: when it fits (the
       common case), done.
    2. Else GEMM rows first, with the smallest attention block ``attn_min`` (every extra row
       block streams the layer's weights once more; a smaller key block only adds a merge of a
       few vector instructions per block), in this order (with ``largest_first``, each row
       block is tried with the largest attention block first: one that fits is the answer of
       step 3 for those rows, without compiling them with the smallest block, which on a long
       prompt's prefill costs 2-3 times the largest's compile: 1.2 s against 0.36 s for 1,920
       GPT3-7B prompt tokens in 960-row blocks; the compiler asks for it in prefill, whose
       attempts that do not fit stop at the first GEMM's buffers, about 1 ms, and not in
       decode, where they run partway through the attention code: a GPT3-7B decode with a
       2 MiB scratchpad, whose rows are halved and bisected, compiled in 18.2 s instead of
       15.0 s with it):
       a. the whole sub-batch with the ring :data:`RING_MIN` (or ``ring`` if smaller: deep
          enough that a preload-bound tile never waits,
          :func:`archsim.npu.timing.weight_ring_slots`), q|k|v in the scratchpad;
       b. decode (``can_stage``) only: the same with q|k|v staged through HBM (the QKV GEMM
          stores each row block's q|k|v, the attention loads each request's row when it
          needs it, so the scratchpad no longer holds every request's q|k|v of both
          sub-batches from the QKV GEMM to the attention: ``2 x rows x (Hq + 2 Hkv) x
          head_dim`` elements, 3 MiB for GPT3-7B at TP4 and 512 requests). Staging costs
          twice those bytes of HBM traffic per layer, an extra row block the layer's weights
          (100 MB there), so staging comes before row blocks;
       c. decode only: a and b with double buffering (2 weight tiles) instead of the ring;
       d. row blocks (q|k|v staged in decode) with the ring, then with double buffering: the
          whole sub-batch halved until it fits, then the fewest blocks that fit (bisection on
          the block count between the last failing and the fitting size): e.g. 13 blocks of
          147 rows rather than 16 of 119. (Prefill, whose rows are prompt tokens, goes from a
          to d: its row blocks are many anyway, and the ring matters more.)
    3. Then the largest attention block, in multiples of ``granule`` up to ``attn_full``, that
       still fits beside those rows, by bisection (fit is taken as monotone in the block).
       With four sizes or more the largest is tried first: when it fits, as it does beside
       the rows of a serving run's long prefills, that is one compile instead of the
       bisection's three or more; when it does not, the attempt fails partway (about a third
       of a compile, 0.2 s on a GPT3-7B decode layer with a 4 MiB scratchpad) and the
       bisection probes what it would have (failures are cached).

    Returns:
        ``(result, row_block, attn_block, staged)``; the ring is the result's.

    Raises:
        CapacityError: the scratchpad too small for one row with double buffering, q|k|v
            staged and the smallest attention block: names the key
            ``npu.scratchpad.size_bytes`` and the last attempt's buffer, bytes needed and free.
    """
    from mapping.errors import CapacityError

    failed_at: dict[tuple, CapacityError] = {}    # an attempt compiles the layer: once each

    def trial(rows: int, w: int, attn: int, staged: bool):
        key = (rows, w, attn, staged)
        if key in failed_at:
            return failed_at[key]
        out = attempt(rows, w, attn, staged)
        if not isinstance(out, tuple):
            failed_at[key] = out
        return out

    got = trial(rows_max, ring, attn_full, False)
    if isinstance(got, tuple):
        return got, rows_max, attn_full, False
    err = got
    w_min = min(ring, RING_MIN)
    rings = [w_min] + ([2] if w_min > 2 else [])
    steps = ([(w, st, False) for w in rings for st in (False, True)]
             + [(w, True, True) for w in rings]) if can_stage else [(w, False, True)
                                                                     for w in rings]
    sizes = [g * granule for g in range(attn_min // granule + 1, attn_full // granule + 1)]
    sizes += [attn_full] if attn_full % granule and attn_full > attn_min else []

    def at_rows(rows: int, w: int, staged: bool):
        # whether ``rows`` fit: the largest key block first (a failed attempt stops at the
        # buffer plan; one that fits is step 3's answer for these rows, and the smallest block
        # fits too: fit is monotone in the block), else the smallest block
        if sizes and largest_first:
            t = trial(rows, w, sizes[-1], staged)
            if isinstance(t, tuple):
                return t, sizes[-1]
        return trial(rows, w, attn_min, staged), attn_min

    for w, staged, search_rows in steps:
        row_block, failed = rows_max, None
        got, attn = at_rows(row_block, w, staged)
        while search_rows and not isinstance(got, tuple) and row_block > 1:
            failed, row_block = row_block, (row_block + 1) // 2
            got, attn = at_rows(row_block, w, staged)
        if not isinstance(got, tuple):
            err = got
            continue
        if failed is not None:
            k_lo, k_hi = ceil_div(rows_max, failed) + 1, ceil_div(rows_max, row_block) - 1
            while k_lo <= k_hi:                 # fewest blocks that fit: fit is monotone
                k = (k_lo + k_hi) // 2
                t, a = at_rows(ceil_div(rows_max, k), w, staged)
                if not isinstance(t, tuple):
                    k_lo = k + 1
                else:
                    got, attn, row_block, k_hi = t, a, ceil_div(rows_max, k), k - 1
        if sizes and attn == sizes[-1]:
            return got, row_block, attn, staged
        lo, hi = 0, len(sizes) - 1
        if len(sizes) >= 4:                     # the largest first: when it fits, no bisection
            t = trial(row_block, w, sizes[-1], staged)      # (with largest_first: failed)
            if isinstance(t, tuple):
                got, attn, lo = t, sizes[-1], len(sizes)
        while lo <= hi:                         # the largest key block that still fits
            mid = (lo + hi) // 2
            t = trial(row_block, w, sizes[mid], staged)
            if isinstance(t, tuple):
                got, attn, lo = t, sizes[mid], mid + 1
            else:
                hi = mid - 1
        return got, row_block, attn, staged
    raise CapacityError(
        f"npu.scratchpad.size_bytes = {scratchpad_bytes} is too small for the smallest buffer "
        "plan (one GEMM row, double-buffered weight tiles, one attention key block"
        f"{', q|k|v through HBM' if can_stage else ''}): {err}",
        resource=err.resource, needed_bytes=err.needed_bytes,
        available_bytes=err.available_bytes)


__all__ += ["search_buffer_plan", "ring_depth", "RING_MIN", "RING_MAX", "RING_SHARE",
            "PIM_BLOCK_TOKENS"]


def add_qkv_staging(plan, model, tp: int, phase: str, n: int, dtype: str) -> None:
    """Decode: reserve the HBM rows ``dq_qkv [n, (Hq + 2 Hkv) head_dim]`` (q|k, then v, per
    request; ``dtype`` elements) in ``plan`` (:class:`mapping.memplan.HbmPlan`) that a buffer
    plan staging q|k|v through HBM uses (:func:`search_buffer_plan`): reserved in every decode
    plan of ``model`` at tensor parallelism ``tp`` for ``n`` requests (a few MB at most), in
    the program's data section only when used. Prefill (``phase``) has its own ``pf_qkv``."""
    if phase == "decode":
        N = (model.heads_per_device(tp) + 2 * model.kv_heads_per_device(tp)) * model.head_dim
        plan.add_linear("dq_qkv", (n, N), dtype, "activation")


__all__ += ["add_qkv_staging"]
