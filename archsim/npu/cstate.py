"""The state of the compiled event loop (:mod:`archsim.npu.cloop`): the executor's run-time
records (:mod:`archsim.npu.state`) as named int64 arrays, the column constants of each array,
and the statuses the loop returns. Built by :class:`archsim.npu.compiled.CompiledRun`; no
timing rule lives here. Cycles are NPU cycles.
"""
from __future__ import annotations

from collections import namedtuple

# ---- the program's tables (archsim.npu.tables)
OP_NOP, OP_SIGNAL, OP_WAIT, OP_END, OP_DMA, OP_LOADW, OP_MATMUL, OP_VU, OP_LINK, OP_PIM = range(10)
"""Instruction classes of ``ProgramTables.OP``."""
K_DMA, K_SA, K_VU, K_LINK, K_PIM = range(5)
"""Stream kinds of ``ProgramTables.SK[:, SK_KIND]``."""
SK_KIND, SK_IDX, SK_OFF, SK_N = range(4)
NIA = 8
# operand columns of IA, by class
I_SEM, I_CNT = 0, 1
I_DOFF, I_DN, I_DSHIFT, I_DWR = 0, 1, 2, 3
I_ARR, I_PRE = 0, 1
I_FEED, I_LAT, I_MACS = 1, 2, 3
I_DUR, I_ELEMS = 0, 1
I_LCYC = 0
I_POK, I_PCMD, I_PCH, I_PMASK, I_PROW, I_PN, I_PNSUB, I_PEST = range(8)

# ---- the loop's state
PIM_RID_BASE = 1 << 62
"""Request id of the n-th PIM command: ``PIM_RID_BASE + n`` (archsim.npu.state)."""
REC_SHIFT = 32
"""A DMA request's id: ``transfer id << REC_SHIFT | index`` (archsim.npu.state)."""

ExecState = namedtuple("ExecState", [
    "X", "REC", "PSIG", "PRING", "PW", "AR", "AQ", "VS", "VQ", "SEMV", "SEMH", "SEMT", "HEAP",
    "READY", "SLW", "MEMW", "PIMST", "TIMES", "G", "P"])
"""The executor's run-time state as arrays (``Executor``'s attributes in brackets):

* ``X[NS, NX]`` per stream (StreamState; columns ``X_*``);
* ``REC[n_dma + 1, NRC]`` DMA transfers by id (DmaRec; ``RC_*``); ``PSIG[.., 4]`` the DMA
  streams' pending SIGNALs (seq, semaphore, count, global index), a ring per stream at
  ``X_PSOFF``;
* ``PRING[NS, depth]`` each PIM stream's commands in flight (their numbers n, oldest at
  ``X_PH``); ``PW[n_pim + 1, 3]`` per PIM command n: stream, submit cycle, index (pim_wait);
* ``AR[arrays, NAA]`` / ``AQ[arrays, sa depth]`` the systolic arrays and the starts of their
  accepted tiles (ArrayState); ``VS[units, NV]`` / ``VQ`` the vector units (VectorState);
* ``SEMV/SEMH/SEMT[65536]`` semaphore values and their waiting streams (first, last; linked
  by ``X_SNX``); ``HEAP[cap, 7]`` the timer heap (cycle, sequence, kind 0 wake / 1 fire,
  stream, semaphore, count, the SIGNAL's global index); ``READY`` the ready ring;
  ``SLW``/``MEMW`` slot and memory
  waiters; ``PIMST[channels, NPM]`` PIM channel statistics;
* ``TIMES[N, NT]`` per instruction (every one, -1 where not reached): start, end, unit, the
  order of its observer call (-1: none: the observer hears of instructions that do work),
  the link start. Start and end are the work's for SA/VU/DMA/PIM/link (the observer's
  times); for a WAIT the cycle the stream reached it and the cycle it was released; for a
  SIGNAL the cycle it was issued and the cycle it fired (the semaphore grew) — both with
  unit ``U_SYNC`` and an observer call, as the executor makes them; NOP and END the cycle
  they were passed (no call);
* ``G[NE]`` the scalars (``E_*``), ``P[NP]`` the parameters (``P_*``).
"""

# per stream X[k, :]
(X_KIND, X_IDX, X_OFF, X_N, X_PC, X_BLK, X_SINCE, X_INR, X_MAXD, X_SEQ, X_FIN, X_WSEM, X_WCNT,
 X_LASTA, X_PNEXT, X_CUR, X_NI, X_FC, X_ST0, X_ST1, X_ST2, X_ST3, X_ST4, X_IH, X_IT, X_PSOFF,
 X_PSCAP, X_PSH, X_PSN, X_PH, X_PCNT, X_SNX, X_INW) = range(33)
NX = 33
# stall causes (archsim.npu.stats.STALL_CAUSES order); -1: not blocked
B_SEM, B_MEM, B_ARRAY, B_VECTOR, B_SETUP = range(5)
# DMA transfers REC[r, :]
(RC_K, RC_SEQ, RC_N, RC_ISS, RC_REM, RC_WR, RC_READY, RC_G, RC_START, RC_OFF, RC_SHIFT,
 RC_NEXT) = range(12)
NRC = 12
# systolic arrays AR[a, :]
(AA_ROWS, AA_SHADOW, AA_PRE, AA_PEND, AA_HASPEND, AA_ACTIVE, AA_HASW, AA_BUSYEND, AA_TILES,
 AA_PRELOADS, AA_MACS, AA_FEED, AA_BUSY, AA_QN) = range(14)
NAA = 14
# vector units VS[u, :]
V_FREE, V_OPS, V_ELEMS, V_BUSY, V_QN = range(5)
NV = 5
# PIM channels PIMST[c, :]
PM_CMDS, PM_BUSY, PM_LAST, PM_SEEN = range(4)
NPM = 4
# per instruction TIMES[g, :]
T_START, T_END, T_UNIT, T_OBS, T_LINK0 = range(5)
NT = 5
U_SYNC = -1
"""``T_UNIT`` of a WAIT or SIGNAL: :data:`archsim.npu.observe.SYNC_UNIT` (checked on import by
:mod:`archsim.npu.compiled`; a copy so that this file alone keys the JIT cache)."""
# scalars G[:]
(E_NOW, E_PHASE, E_OUT, E_IC, E_IU, E_BS, E_DI, E_DREQ, E_DBR, E_DBW, E_DBUSY, E_RECC, E_PIMC,
 E_HN, E_HSEQ, E_RH, E_RN, E_NSLW, E_NMEMW, E_NFIN, E_OBS, E_ERRK, E_ERRG, E_ERRA, E_STEPS,
 E_HOVF) = range(26)
NE = 26
# parameters P[:]
(P_H, P_SADEPTH, P_VUDEPTH, P_MAXO, P_R, P_SETUP, P_PDEPTH, P_UNIT, P_MAXC, P_MAXB,
 P_PIMROOM) = range(11)
NP = 11
PH_INIT, PH_TOP, PH_ADVANCE = range(3)
# statuses of _loop
(RUN_DONE, RUN_NEED_LOG, RUN_NEED_ROOM, RUN_DEADLOCK, RUN_MAXCYC, RUN_MEM_ERROR,
 RUN_SA_ANY, RUN_SA_NOW, RUN_PIM_BAD, RUN_INTERNAL) = range(10)
OK = 0
"""Status of a stream step that needs nothing from the caller."""



__all__ = ["ExecState", "PIM_RID_BASE", "REC_SHIFT", "OK", "NIA"] + [
    n for n in dir() if n[:2] in ("X_", "B_", "V_", "T_", "E_", "P_", "K_", "I_", "U_")
    or n[:3] in ("OP_", "SK_")
    or n[:3] in ("RC_", "AA_", "PM_", "PH_") or n[:4] == "RUN_" or n in ("NX", "NRC", "NAA",
                                                                         "NV", "NPM", "NT",
                                                                         "NE", "NP")]
