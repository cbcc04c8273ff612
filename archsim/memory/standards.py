"""Memory standards as data: organisation, timings, currents and capabilities of each HBM kind.

``memory.kind`` selects one :class:`Standard`; its values are the defaults of the ``org``,
``timing`` and ``power`` sections of the machine configuration (a configuration may override
any of them), its ``refresh_modes`` are the refresh policies the standard's command set allows,
and :data:`archsim.memory.spec.CONSTRAINTS` rows marked with a standard apply only to it. The
controller, the compiled kernel and the checker interpret these tables; adding a standard is
adding an entry here (and rows to the constraint table where its rules differ), not a code
path. Every value carries its source in ``sources``.

Level mapping: archsim's hierarchy is channel ⊃ rank ⊃ bank group ⊃ bank. For HBM2/HBM2E a
channel is a 128-bit legacy channel and a rank a stack id (SID); for HBM3 a channel is one
32-bit pseudo-channel (its own data bus and, here, its own command bus — JESD238 shares the
row/column command buses of a channel's two pseudo-channels; not modelled) and a rank a SID.

This module is a leaf: it imports nothing from the project (the configuration schema reads it).
"""
from __future__ import annotations

from dataclasses import dataclass, field

REFRESH_MODES = ("all_bank", "rank_staggered", "per_bank")
"""Refresh policies (see :class:`archsim.config.RefreshConfig`)."""


@dataclass(frozen=True)
class Standard:
    """One memory standard (all cycles are tCK of its ``timing.tCK_ns``).

    Attributes:
        name: the ``memory.kind`` value.
        title: human description (speed grade, width, capacity).
        org: defaults of :class:`archsim.config.OrgConfig` (per channel: ranks, bank groups,
            banks, rows, columns, column width in bits, burst length, page bytes; device:
            channels).
        timing: defaults of :class:`archsim.config.TimingConfig` (JEDEC names, cycles).
        power: defaults of :class:`archsim.config.PowerConfig` (IDD currents in mA, VDD in V).
        beats_per_clock: data beats per tCK on each DQ pin (2 for double data rate; HBM3 4).
        refresh_modes: refresh policies its command set supports (REFab per rank; REFpb/REFSB).
        sources: where each group of values comes from.
    """

    name: str
    title: str
    org: dict
    timing: dict
    power: dict
    beats_per_clock: int = 2
    refresh_modes: tuple[str, ...] = REFRESH_MODES
    sources: dict = field(default_factory=dict)


_HBM2_TIMING = {
    "tCK_ns": 1.0, "CL": 14, "CWL": 4, "tRCDRD": 14, "tRCDWR": 14, "tRP": 14, "tRAS": 34,
    "tRFC": 260, "tREFI": 3900, "tRRD_S": 4, "tRRD_L": 6, "tWTR_S": 6, "tWTR_L": 8,
    "tFAW": 30, "tWR": 16, "tCCD_S": 1, "tCCD_L": 2, "tRTP_L": 6,
    "tRFCpb": 160, "tRREFD": 8,
}
_HBM2_POWER = {"vdd_v": 1.2, "idd0_ma": 65, "idd2n_ma": 40, "idd3n_ma": 55, "idd4r_ma": 390,
               "idd4w_ma": 500, "idd5ab_ma": 250}
_HBM2_ORG = {"channels": 32, "ranks": 2, "bank_groups": 4, "banks_per_group": 4,
             "rows": 32768, "columns": 64, "column_width_bits": 128, "burst_length": 4,
             "page_size_bytes": 1024}


def _ns_to_cycles(values: dict, tck_ns: float, keep: tuple[str, ...] = ()) -> dict:
    """Timings given in HBM2 cycles of 1 ns, converted to cycles of ``tck_ns`` (rounded up;
    JEDEC minimum times), except the keys in ``keep`` (clock-counted values)."""
    import math
    out = {}
    for k, v in values.items():
        if k == "tCK_ns":
            out[k] = tck_ns
        elif k in keep:
            out[k] = v
        else:
            out[k] = max(1, math.ceil(v * 1.0 / tck_ns - 1e-9))
    return out


STANDARDS: dict[str, Standard] = {
    "hbm2": Standard(
        name="hbm2",
        title="HBM2 (JESD235), 2.0 Gb/s/pin, 32 legacy 128-bit channels x 1 GiB (4 stacks)",
        org=dict(_HBM2_ORG), timing=dict(_HBM2_TIMING), power=dict(_HBM2_POWER),
        sources={
            "org": "NeuPIMs reference HBM2 configuration = DRAMsim3 configs/HBM2_8Gb_x128.ini "
                   "(4 bank groups x 4 banks, 32768 rows, 1 KB page, x128, BL4), 2 SIDs",
            "timing": "DRAMsim3 configs/HBM2_8Gb_x128.ini (tCK 1 ns: CL 14, CWL 4, tRCD 14, "
                      "tRP 14, tRAS 34, tRFC 260, tREFI 3900, tRRD_S/L 4/6, tWTR_S/L 6/8, tFAW "
                      "30, tWR 16, tCCD_S/L 1/2, tRTP_L 6), the NeuPIMs reference values; "
                      "tRFCpb (tRFCSB) 160 ns and tRREFD 8 ns: JESD235D as tabulated in "
                      "Ramulator 2.1 python/ramulator/dram/hbm2.py",
            "power": "DRAMsim3 configs/HBM2_8Gb_x128.ini [power] (IDD0 65, IDD2N 40, IDD3N 55, "
                     "IDD4R 390, IDD4W 500, IDD5AB 250 mA, VDD 1.2 V)",
        }),
    "hbm2e": Standard(
        name="hbm2e",
        title="HBM2E (JESD235D), 3.2 Gb/s/pin, 32 legacy 128-bit channels x 2 GiB",
        org=dict(_HBM2_ORG, rows=65536),
        timing=_ns_to_cycles(dict(_HBM2_TIMING, tRFC=350), 0.625,
                             keep=("tCCD_S", "tCCD_L")),
        power=dict(_HBM2_POWER),
        sources={
            "org": "HBM2's organisation with 16 Gb dies (65536 rows per bank: 2 GiB per "
                   "channel), JESD235D",
            "timing": "HBM2's nanosecond timings (DRAMsim3 HBM2_8Gb_x128.ini at tCK 1 ns) at "
                      "tCK 0.625 ns (3.2 Gb/s), rounded up; tCCD_S/L kept in clocks; tRFC 350 "
                      "ns for 16 Gb dies (JESD235D table in Ramulator 2.1 hbm2.py). No public "
                      "HBM2E timing sheet is cited: treat as an estimate",
            "power": "HBM2's currents (DRAMsim3 HBM2_8Gb_x128.ini); no public HBM2E IDD table "
                     "(assumption)",
        }),
    "hbm3": Standard(
        name="hbm3",
        title="HBM3 (JESD238), 6.4 Gb/s/pin, 32 pseudo-channels of 32 bit x 512 MiB "
              "(one 8-high 16 Gb stack)",
        org={"channels": 32, "ranks": 2, "bank_groups": 4, "banks_per_group": 4,
             "rows": 16384, "columns": 256, "column_width_bits": 32, "burst_length": 8,
             "page_size_bytes": 1024},
        timing={"tCK_ns": 0.625, "CL": 20, "CWL": 10, "tRCDRD": 31, "tRCDWR": 15, "tRP": 26,
                "tRAS": 45, "tRC": 72, "tRFC": 560, "tREFI": 6240, "tRRD_S": 4, "tRRD_L": 5,
                "tWTR_S": 7, "tWTR_L": 10, "tFAW": 24, "tWR": 33, "tCCD_S": 2, "tCCD_L": 4,
                "tRTP_L": 9, "tRFCpb": 320, "tRREFD": 13, "tRTW": 20,
                "tPPD": 2},
        power={"vdd_v": 1.1, "idd0_ma": 65, "idd2n_ma": 40, "idd3n_ma": 55, "idd4r_ma": 390,
               "idd4w_ma": 500, "idd5ab_ma": 250},
        beats_per_clock=4,
        sources={
            "org": "JESD238 as tabulated in Ramulator 2.1 python/ramulator/dram/hbm3.py "
                   "(HBM3_16Gb_8hi: 2 pseudo-channels per channel, 2 SIDs, 4 bank groups x 4 "
                   "banks, 16384 rows, 1 KB page, 32-bit pseudo-channel, BL8); 16 channels = "
                   "32 pseudo-channels per stack",
            "timing": "Ramulator 2.1 hbm3.py HBM3_6400Mbps preset (tCK 0.625 ns: CL 20, CWL "
                      "10, tRCDRD 31, tRCDWR 15, tRP 26, tRAS 45, tRC 72, tWR 33, tRTP 9, "
                      "tCCD_S/L 2/4, tRRD_S/L 4/5, tFAW 24, tWTR_S/L 7/10, tRTW 20, tPPD 2, "
                      "tRFCpb 320, tREFI 6240), tRFC 350 ns for 8 Gb per channel (JESD238 "
                      "table 84 via Ramulator 2.1), tRREFD max(3 tCK, 8 ns) = 13",
            "power": "no public JESD238 IDD table: HBM2's currents at VDD 1.1 V (assumption)",
        }),
}
"""Every ``memory.kind`` value and its standard."""


def standard(kind: str) -> Standard:
    """The :class:`Standard` of ``memory.kind``; KeyError for an unknown kind."""
    return STANDARDS[kind]


__all__ = ["Standard", "STANDARDS", "REFRESH_MODES", "standard"]
