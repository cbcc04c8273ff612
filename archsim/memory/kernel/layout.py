"""State of the compiled controller: one named tuple of flat int64 arrays, and their layouts.

Every kernel function takes the state ``S`` (:class:`MemState`) and reads the arrays it needs
from it (``S.CS[c, C_NOW]``); the column constants below name the fields of each array. The
Python side (:class:`archsim.memory.kernel.port.KernelMemory`) owns the arrays, grows them and
rebuilds ``S`` when one is replaced. All cycles are memory-clock cycles (tCK).

Command codes are the indices of :data:`archsim.memory.spec.COMMANDS`; the kernels read them as
the constants of this module, which numba freezes into the machine code. Their cache directory
is keyed by the content of the spec (:mod:`archsim.memory.kernel.jit`), so a reordered command
table always recompiles.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from archsim.memory.spec import CMD_INDEX, COMMANDS

INF = 1 << 62
NCMD = len(COMMANDS)
ACT, PRE, RD, WR, RDA, WRA, REF, REFPB = (
    CMD_INDEX[c] for c in ("ACT", "PRE", "RD", "WR", "RDA", "WRA", "REF", "REFpb"))
if (ACT, PRE, RD, WR, RDA, WRA) != tuple(range(6)):    # pragma: no cover - spec order
    raise ImportError("the kernel's tables index the memory commands ACT..WRA as 0..5")
HEADER, GWRITE, G_ACT, COMP, READRES, GEMV, PIM_PRE, ENTER, EXIT = (
    CMD_INDEX[c] for c in ("PIM_HEADER", "GWRITE", "G_ACT", "COMP", "READRES", "PIM_GEMV",
                           "PIM_PRE", "PIM_ENTER", "PIM_EXIT"))
KIND_CMD = {"G_ACT": G_ACT, "COMP": COMP, "PIM_GEMV": GEMV, "PIM_HEADER": HEADER,
            "READRES": READRES, "GWRITE": GWRITE, "PIM_PRECHARGE": PIM_PRE, "PIM_PRE": PIM_PRE}
"""PIM request kind (:class:`archsim.memport.PimOpKind` value) -> command index."""

MemState = namedtuple("MemState", [
    "CS", "RS", "BK", "NXT", "LAT", "LATK", "WT", "WW", "STG", "BU", "BFREE", "RQ", "RQFREE",
    "PO", "PQ", "POFREE", "CQ", "GL", "LOG", "CNT", "LD", "PA", "OUT", "DEC", "MLAT", "PLAT",
    "RF", "RU", "DONE"])
"""The controller's whole state (every field an int64 array; shapes with C channels, R ranks,
nb banks per channel, N nodes = 1 + R + R·G + nb):

* ``CS[C, NCS + NMQ·R]`` (padded, :func:`line_array`) per-channel scalars (``C_*``),
  then the channel's table of earliest cycles (:data:`C_ET`); ``RS[C, R, NRS]`` per rank (``R_*``);
  ``RF[C, U, 2]`` per refresh unit (``F_*``: due cycle, pending) and ``RU[U, 2]`` its first
  bank and bank count (U = ranks, or banks under per-bank refresh);
  ``BK[C, nb, B_Q0 + queue]`` per bank (``B_*``) followed by its queue of burst slots;
* ``NXT[C, N, NCMD]`` earliest issue cycle of every command at every timing node (node 0 the
  channel, 1..R the ranks, then bank groups, then banks); ``LAT[4, NCMD, 1 + 2·NCMD]`` the
  constraint table per level as sparse ``[n, q_0, lat_0, ...]`` lists; ``LATK[4, NCMD, NCMD]``
  1 where the latency depends on a PIM_GEMV's k; ``WT``/``WW[C, R, WCAP]`` the activation
  window history (cycles, weights) per rank;
* ``STG[C, cap]`` the input FIFO ring of burst slots per channel (head ``C_SH``, tail ``C_ST``;
  ``cap`` a power of two, like ``PQ``'s: the kernels index both with ``& (cap - 1)``);
  ``BU[n, 7]`` burst pool (``U_*``), ``RQ[n, 5]`` request pool (``Q_*``), ``PO[n, 9]`` PIM
  op pool (``P_*``), each with a free stack (``*FREE[0]`` entries); ``PQ[C, cap]`` the PIM
  queue ring per channel (head ``C_PH``, tail ``C_PT``);
* ``CQ[cap, 4]`` completion queue (cycle, request id, latency, kind: 0 memory, 1 + c a
  PIM request of channel c): a ring of a power-of-two capacity, ``GL[G_NCQ]`` entries from
  slot ``GL[G_CQH]`` on, sorted by (cycle, request id) (``issue._cq_push``); ``OUT[n, 4]`` the
  completions of the last :func:`advance_all`; ``GL[NGL]`` globals (``G_*``);
  ``LOG[n, 8]`` command log (cycle, channel, rank, bank group, bank, command, row, column);
  ``CNT[C, NCMD]`` command counts; ``LD[C, nb + 3]`` bursts per bank (queued or in the FIFO),
  then the channel's total, its reads and its writes (columns ``PA[A_LTOT]`` + 0, 1, 2);
* ``PA[NPA]`` parameters (``A_*``); ``DEC[6, 2]``
  (shift, mask) of the address fields ch, ra, bg, ba, ro, co;
* ``MLAT``/``PLAT`` latencies (cycles, arrival to completion) of completed memory / PIM
  requests as a histogram and a spill list: ``X[l]`` for ``0 <= l < LAT_BINS`` counts the
  requests of latency ``l``, and the ``GL[G_NMLAT]`` / ``GL[G_NPLAT]`` latencies of ``LAT_BINS``
  cycles or more follow at ``X[LAT_BINS:]`` (a GPT3-175B window completes ~3·10^7 requests:
  their own list was 0.5 GB; :class:`archsim.memory.system.LatencyCounts` reads both parts);
  ``DONE[request id]`` the completion
  cycle of each memory request in the direct mode of a trace replay (``GL[G_DIRECT]`` = 1:
  request ids 0..N-1, no completion queue).
"""

# per-channel scalars CS[c, :]
# (ordered by use, eight to a cache line (line_array): what every visit of the event loop reads,
# then the decision's, the last decision's best, the statistics the issues keep)
(C_NOW, C_TMIN, C_NEV, C_NEVOK, C_NKIND, C_WTENT, C_SH, C_ST,
 C_NQ, C_PH, C_PT, C_NCMD, C_NB, C_NX, C_QMASK, C_MODE,
 C_WMODE, C_NQW, C_OMASK, C_ETOK, C_PBOK, C_PBT, C_PBK, C_PBC,
 C_PBB, C_PBX, C_PBW, C_PDM, C_DIRTY, C_PINF, C_NCMDS, C_LAST,
 C_FIRST, C_OPEN, C_OSINCE, C_ACTIVE, C_PACT, C_PPRE, C_CSTEPS, C_BR, C_BW, C_PBUSY, C_PBEND,
 C_PCOMP, C_PCEND) = range(45)
NCS = 45
C_ET = NCS
"""``CS[c, C_ET:]``: the channel- and rank-level earliest cycles of the memory commands, per
rank (``NMQ`` each, by command index: ACT PRE RD WR RDA WRA are 0..5) the later of the
channel's and the rank's, entry ``i`` valid while bit ``i`` of ``CS[c, C_ETOK]`` is
set (computed when first read, :func:`archsim.memory.kernel.timing._et`). They depend
only on the channel's ``NXT`` rows and activation windows, which change only when a
command is recorded (``_issue``, the only caller of ``_record``, clears the bits)."""
# C_NEV/C_NEVOK: the channel's cached decision (valid while C_NEVOK = 1): its cycle, and with
# C_NKIND = 2 the action itself (C_NCMD, C_NB, C_NX), reused by advance_all instead of
# deciding again when that cycle is reached (nothing of the channel changed meanwhile).
# C_QMASK: bit b set when bank b's queue is not empty (channels of at most 63 banks; the
# decision walks only those banks). C_WMODE: direction served (1 writes; drain write policy);
# C_NQW: writes queued at the banks (reads: C_NQ - C_NQW); C_OMASK: bit b set when bank b's
# memory row is open; C_PINF: PIM requests in flight (pushed, completion not yet popped);
# C_WTENT: 1 while C_WMODE was chosen at a cycle not yet committed (undone by a pushed burst;
# ChannelController.wtent); C_ETOK: validity bits of the table at C_ET.
# C_PBOK..C_DIRTY: the best candidate of the channel's last decision, kept for the next one
# while only admissions happen in between (scheduler._decide, "admission-only re-decision"):
# C_PBOK 1 = valid (cleared by any command issued, a PIM request pushed, a write-mode change),
# its cycle C_PBT, key C_PBK, command C_PBC, bank / unit C_PBB, burst / op C_PBX, C_PBW 1 when
# it came from the walk over the banks, C_PDM the banks its refresh drained; C_DIRTY bit b set
# when an admission invalidated bank b's candidate since that decision
# per-rank RS[c, r, :]: the activation window's ring (head, length), then the earliest cycle
# the window alone admits one more ACT / G_ACT (-INF: now; timing._window_bound, kept by
# timing._record whenever the ring changes)
R_WHEAD, R_WLEN, R_WBA, R_WBG = range(4)
NRS = 4
# per refresh unit RF[c, u, :] and its static scope RU[u, :]
F_DUE, F_PEND = range(2)
RU_B0, RU_SPAN = range(2)
# per-bank BK[c, b, :] then the queue from column B_Q0. The eight columns a decision's walk
# over the queued banks reads (B_QLEN..B_BGI) come first: one 64-byte cache line per bank
# (rows padded to a multiple of eight and the array 64-byte aligned: line_array). B_CV..B_CT:
# the bank's cached memory-command candidate of the decision: B_CV 0 = stale, 1 = command
# (B_CCMD, key B_CKEY, burst B_CX; B_CCMD = -1: no burst of the direction served) valid but not its
# bank-group/bank part of the earliest cycle, 2 = that part (B_CT) too. B_STREAK: column
# commands on the open row since its ACT; B_LAST: cycle of its ACT or last column command.
# B_RK..B_BA: the bank's place in the channel, constant, set when the state is built (so that
# the hot paths read them instead of dividing by runtime bank counts): its rank, its flat bank
# group (b // banks_per_group: node 1 + R + B_BGI), the group within the rank, the bank within
# the group
B_QLEN, B_CV, B_CCMD, B_CKEY, B_CX, B_CT, B_RK, B_BGI, B_G, B_BA, B_OPEN, B_PIM, B_STREAK, \
    B_LAST, B_Q0 = range(15)

# bursts BU[i, :]
U_SEQ, U_REQ, U_BANK, U_ROW, U_COL, U_WR, U_ARR = range(7)
# requests RQ[i, :]
Q_RID, Q_ARR, Q_REM, Q_DONE, Q_WR = range(5)
# PIM ops PO[i, :]
P_RID, P_KIND, P_ARR, P_EST, P_MASK, P_ROW, P_N, P_CUR, P_NSUB = range(9)
# globals GL[:]: completions queued, burst sequence counter, log entries, status, error code and
# operand, completions in OUT, log on/off, latencies recorded, requests outstanding, direct
# mode, decisions made / made by the admission-only re-decision (scheduler._decide), the
# completion queue's head slot
(G_NCQ, G_SEQ, G_NLOG, G_STATUS, G_ERRC, G_ERRX, G_NOUT, G_LOGON, G_NMLAT, G_NPLAT,
 G_OUTM, G_OUTP, G_DIRECT, G_NDEC, G_NFAST, G_CQH) = range(16)
LAT_BINS = 1 << 14
"""Latencies below this many cycles are counted in the histogram part of ``MLAT`` / ``PLAT``."""
NGL = 16
# parameters PA[:]
(A_R, A_G, A_B, A_QB, A_QC, A_CL, A_CWL, A_BL, A_TRCD, A_TRP, A_CSTEP, A_RDRES, A_GWR,
 A_TRFC, A_TREFI, A_FILL, A_DUAL, A_WN, A_WSPAN, A_WACT, A_WGACT, A_BB, A_DEFK,
 A_SCHED, A_CAP, A_PAGE, A_TMO, A_WPOL, A_QW, A_WHI, A_WLO, A_REFM, A_REFPER, A_NU, A_TRFCU,
 A_PDEPTH, A_LTOT, A_DEFAULT, A_FAST) = range(39)
NPA = 39
# policies (archsim.memory.policy codes): A_SCHED scheduler, A_CAP its row-hit cap, A_PAGE page
# policy, A_TMO its timeout, A_WPOL write policy, A_QW write queue, A_WHI/A_WLO watermarks
# (bursts), A_REFM refresh mode, A_REFPER a unit's refresh period, A_NU units, A_TRFCU a unit's
# tRFC, A_PDEPTH PIM queue depth; A_LTOT the LD column of the channel total; A_DEFAULT 1 for
# FR-FCFS + open page (either write policy: the bank-candidate cache keeps its cheaper
# invalidation); A_FAST 1 when an admission-only re-decision may reuse the last best candidate (not
# the timeout page policy, whose idle closes follow the queued banks; at most 63 banks a
# channel, the bit masks)
NMQ = 6                         # memory commands of the earliest-cycle tables (0..5)
WCAP = 16           # activation-window history per rank (entries within tFAW <= N)

ST_OK, ST_LOG_FULL, ST_OUT_FULL, ST_ERROR = 0, 1, 2, 3
ERR_GACT_OPEN, ERR_NO_PIM_ROW = 1, 2


def line_array(*shape: int) -> np.ndarray:
    """Zeroed int64 array of ``shape`` with its last axis padded to a multiple of 8 and its
    start on a 64-byte boundary: each row of 8k columns starts a cache line (a bank's
    decision columns ``B_QLEN..B_BGI``, a burst, a request, a channel's hot scalars fill one
    line). The kernels index the state by name, never by the padded width."""
    *lead, last = shape
    width = -(-last // 8) * 8
    n = int(np.prod(lead, dtype=np.int64)) * width
    buf = np.zeros(n + 8, np.int64)
    off = (-buf.ctypes.data % 64) // 8
    return buf[off:off + n].reshape(*lead, width)


__all__ = [n for n in dir() if n.isupper() or n in ("MemState", "line_array")]
