"""Instruction generation for the work items of :mod:`mapping.schedule`.

One :class:`Codegen` emits a whole program (one layer or a layer stack) for one device.

Streams (``A`` systolic arrays, ``V`` vector units, ``C`` channels; see :mod:`isa.program`):

* ``sa{i}``: systolic array ``i``; ``dma{i}``: its weight-tile loads (double buffered);
* ``vu{j}`` and its DMA queue ``dma{A+j}``; the first half of the vector units (*chain VUs*) run
  the vector work of the GEMM chains (norms, GEMM epilogues, bias, RoPE, activations,
  residuals), the second half (*attention VUs*) the attention's NPU work (softmax, gathers for
  GWRITE, partial-sum reduction; or the whole attention on an NPU-only system), so that
  sub-batch interleaving is not blocked by in-order vector queues;
* ``pim{c}``: PIM channel ``c``;
* ``link``: the device links: an ``ALL_REDUCE`` per tensor-parallel all-reduce (bytes, group,
  ring), the expert-parallel ``ALL_TO_ALL`` dispatch and return of a mixture of experts
  (:mod:`mapping.codegen.moe`), and the pipeline-parallel hand-off (``RECV`` of the stage's input first, ``SEND`` of
  its output last; :meth:`Codegen.handoff`).

Data flow of one sub-batch of ``m`` token rows (decode):

* activations between operators stay in the scratchpad, row-major ``[m, cols]``; the systolic
  arrays read their input *blocked* ``[ceil(K/H)][m][H]`` (dense ``[m, kh]`` blocks, made by
  ``VU_COPY``) and accumulate each ``[m, W]`` output block in fp32; the epilogue ``VU_COPY``
  converts it to the model dtype into the row-major destination;
* weights are loaded tile by tile (``DMA_LOAD`` of a contiguous tiled ``[kh, wn]`` tile into one of
  two scratchpad buffers per array, ``SA_LOADW``, ``SA_MATMUL``); the DMA of tile ``t+1`` overlaps
  the matmul of tile ``t`` (semaphores in both directions);
* the layer input and output are rows of ``hidden.{l}`` in HBM (row ``row_of_request[i]``).

Decode attention on PIM, per request (DESIGN §3 layout, :mod:`mapping.kvlayout`): ``DMA_STORE``
of the new K row (one per key row chunk) and V elements (one per head and dimension tile, a
strided store across banks), then per key chunk ``GWRITE`` q and per token group ``PIM_HEADER,
G_ACT, PIM_GEMV x heads, PIM_PRECHARGE`` (scores into the scratchpad), ``VU_SCALE`` +
``VU_SOFTMAX`` (length mask), ``VU_COPY`` gathers of probability runs, per (run, value group)
``GWRITE`` and per dimension tile ``PIM_HEADER, G_ACT, PIM_GEMV x slots, PIM_PRECHARGE``, then
``VU_ADD`` of the run partials and a ``VU_COPY`` into the projection's blocked input. Requests
of a channel are software-pipelined over two buffer slots (q.K of request k+1 overlaps the
softmax of request k).

Prefill and mixed (chunked prefill): prompt rows go through HBM (``pf_qkv``, ``pf_ao``) and
their attention runs on the arrays (:mod:`mapping.codegen.prefill_attention`, a chunk's cached
prefix loaded by :mod:`mapping.codegen.kv_load`); a mixed sub-batch's decode rows share its
GEMMs and stay in the scratchpad (:mod:`mapping.codegen.mixed`).
"""
from __future__ import annotations

from mapping.codegen.attention import Attention
from mapping.codegen.core import PREFILL_Q_TILE, PREFILL_SLAB_BYTES, Buf, CodegenCore, part_tag
from mapping.codegen.gemm import GemmChains
from mapping.codegen.kv_load import KvLoad
from mapping.codegen.kv_store import KvStore
from mapping.codegen.mixed import MixedRows
from mapping.codegen.moe import MoeFfn
from mapping.codegen.npu_attention import NpuAttention
from mapping.codegen.pim_attention import PimAttention
from mapping.codegen.prefill_attention import PrefillAttention


class Codegen(GemmChains, MoeFfn, MixedRows, Attention, PimAttention, KvStore, KvLoad,
              NpuAttention, PrefillAttention, CodegenCore):
    """Emits the instructions of work items into a :class:`ProgramBuilder`.

    Args:
        ctx: the compilation context (:class:`mapping.compiler.Context`).
    """


__all__ = ["Codegen", "Buf", "part_tag", "PREFILL_Q_TILE", "PREFILL_SLAB_BYTES"]
