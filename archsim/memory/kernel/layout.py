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

from archsim.memory.spec import CMD_INDEX, COMMANDS

INF = 1 << 62
NCMD = len(COMMANDS)
ACT, PRE, RD, WR, REF = (CMD_INDEX[c] for c in ("ACT", "PRE", "RD", "WR", "REF"))
HEADER, GWRITE, G_ACT, COMP, READRES, GEMV, PIM_PRE, ENTER, EXIT = (
    CMD_INDEX[c] for c in ("PIM_HEADER", "GWRITE", "G_ACT", "COMP", "READRES", "PIM_GEMV",
                           "PIM_PRE", "PIM_ENTER", "PIM_EXIT"))
KIND_CMD = {"G_ACT": G_ACT, "COMP": COMP, "PIM_GEMV": GEMV, "PIM_HEADER": HEADER,
            "READRES": READRES, "GWRITE": GWRITE, "PIM_PRECHARGE": PIM_PRE, "PIM_PRE": PIM_PRE}
"""PIM request kind (:class:`archsim.memport.PimOpKind` value) -> command index."""

MemState = namedtuple("MemState", [
    "CS", "RS", "BK", "NXT", "LAT", "LATK", "WT", "WW", "STG", "BU", "BFREE", "RQ", "RQFREE",
    "PO", "PQ", "POFREE", "HP", "GL", "LOG", "CNT", "LD", "PA", "OUT", "DEC", "MLAT", "PLAT"])
"""The controller's whole state (every field an int64 array; shapes with C channels, R ranks,
nb banks per channel, N nodes = 1 + R + R·G + nb):

* ``CS[C, NCS]`` per-channel scalars (``C_*``); ``RS[C, R, 4]`` per rank (``R_*``);
  ``BK[C, nb, B_Q0 + queue]`` per bank (``B_*``) followed by its queue of burst slots;
* ``NXT[C, N, NCMD]`` earliest issue cycle of every command at every timing node (node 0 the
  channel, 1..R the ranks, then bank groups, then banks); ``LAT[4, NCMD, 1 + 2·NCMD]`` the
  constraint table per level as sparse ``[n, q_0, lat_0, ...]`` lists; ``LATK[4, NCMD, NCMD]``
  1 where the latency depends on a PIM_GEMV's k; ``WT``/``WW[C, R, WCAP]`` the activation
  window history (cycles, weights) per rank;
* ``STG[C, cap]`` the input FIFO ring of burst slots per channel (head ``C_SH``, tail ``C_ST``);
  ``BU[n, 7]`` burst pool (``U_*``), ``RQ[n, 5]`` request pool (``Q_*``), ``PO[n, 9]`` PIM
  op pool (``P_*``), each with a free stack (``*FREE[0]`` entries); ``PQ[C, cap]`` the PIM
  queue ring per channel (head ``C_PH``, tail ``C_PT``);
* ``HP[n, 4]`` completion min-heap (cycle, request id, latency, is_pim); ``OUT[n, 4]`` the
  completions of the last :func:`advance_all`; ``GL[NGL]`` globals (``G_*``);
  ``LOG[n, 8]`` command log (cycle, channel, rank, bank group, bank, command, row, column);
  ``CNT[C, NCMD]`` command counts; ``LD[C, nb + 1]`` bursts per bank (queued or in the FIFO),
  the last column the channel's total;
* ``PA[NPA_SCRATCH]`` parameters (``A_*``) then scratch space of the decision; ``DEC[6, 2]``
  (shift, mask) of the address fields ch, ra, bg, ba, ro, co;
* ``MLAT``/``PLAT`` latencies (cycles, arrival to completion) of completed memory / PIM
  requests, counts in ``GL[G_NMLAT]`` / ``GL[G_NPLAT]``.
"""

# per-channel scalars CS[c, :]
C_NOW, C_TMIN, C_NQ, C_SH, C_ST, C_PH, C_PT, C_MODE, C_FIRST, C_LAST, C_OPEN, C_OSINCE, \
    C_ACTIVE, C_PACT, C_PPRE, C_CSTEPS, C_BR, C_BW, C_PBUSY, C_PBEND, C_PCOMP, C_PCEND, \
    C_NCMDS, C_NEV, C_NEVOK, C_NKIND, C_NCMD, C_NB, C_NX, C_QMASK = range(30)
NCS = 30
# C_NEV/C_NEVOK: the channel's cached decision (valid while C_NEVOK = 1): its cycle, and with
# C_NKIND = 2 the action itself (C_NCMD, C_NB, C_NX), reused by advance_all instead of
# deciding again when that cycle is reached (nothing of the channel changed meanwhile).
# C_QMASK: bit b set when bank b's queue is not empty (channels of at most 63 banks; the
# decision walks only those banks)
# per-rank RS[c, r, :]
R_DUE, R_PEND, R_WHEAD, R_WLEN = range(4)
# per-bank BK[c, b, :] then the queue from column B_Q0. B_CV..B_CT: the bank's cached
# memory-command candidate of the decision: B_CV 0 = stale, 1 = command (B_CCMD, key B_CKEY,
# burst B_CX) valid but not its bank-group/bank part of the earliest cycle, 2 = that part
# (B_CT) too
B_OPEN, B_PIM, B_QLEN, B_CV, B_CCMD, B_CKEY, B_CX, B_CT, B_Q0 = range(9)
# bursts BU[i, :]
U_SEQ, U_REQ, U_BANK, U_ROW, U_COL, U_WR, U_ARR = range(7)
# requests RQ[i, :]
Q_RID, Q_ARR, Q_REM, Q_DONE, Q_WR = range(5)
# PIM ops PO[i, :]
P_RID, P_KIND, P_ARR, P_EST, P_MASK, P_ROW, P_N, P_CUR, P_NSUB = range(9)
# globals GL[:]: heap size, burst sequence counter, log entries, status, error code and
# operand, completions in OUT, log on/off, latencies recorded, requests outstanding
(G_HEAP, G_SEQ, G_NLOG, G_STATUS, G_ERRC, G_ERRX, G_NOUT, G_LOGON, G_NMLAT, G_NPLAT,
 G_OUTM, G_OUTP) = range(12)
NGL = 12
# parameters PA[:]
(A_R, A_G, A_B, A_QB, A_QC, A_CL, A_CWL, A_BL, A_TRCD, A_TRP, A_CSTEP, A_RDRES, A_GWR,
 A_TRFC, A_TREFI, A_FILL, A_DUAL, A_WN, A_WSPAN, A_WACT, A_WGACT, A_BB, A_DEFK) = range(23)
NPA = 23
S_DRAIN, S_CE, S_RE = NPA, NPA + 16, NPA + 20   # scratch of the decision at the end of PA
NPA_SCRATCH = NPA + 20 + 4 * 16
WCAP = 16           # activation-window history per rank (entries within tFAW <= N)

ST_OK, ST_LOG_FULL, ST_OUT_FULL, ST_ERROR = 0, 1, 2, 3
ERR_GACT_OPEN, ERR_NO_PIM_ROW = 1, 2

__all__ = [n for n in dir() if n.isupper() or n == "MemState"]
