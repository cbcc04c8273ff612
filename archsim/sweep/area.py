"""Area proxy of an NPU + PIM machine, for trading area against throughput and energy in sweeps.

This is a *proxy* for relative comparison of design points, not a floor plan: it counts the
silicon that the swept keys add or remove (systolic-array PEs, vector lanes, scratchpad SRAM,
per-bank PIM multipliers and the second row buffer of dual-row-buffer banks) and weights each by a
per-unit area. The unit is mm² in a **45 nm-equivalent** process, because the only public,
self-consistent table of arithmetic-unit areas is at 45 nm:

    area_proxy_mm2 = 1e-6 × [ n_arrays · H · W · A_pe                       (NPU arrays)
                             + vector.count · vector.lanes · A_lane         (vector units)
                             + scratchpad.size_bytes · A_sram_B             (on-chip SRAM)
                             + channels · banks_per_channel · mult_per_bank · A_pim_mult
                                                                            (PIM units, if pim)
                             + channels · banks_per_channel · page_size_bytes · A_rb_B
                                                                  (2nd row buffer, if dual) ]

Per-unit constants (µm², 45 nm; all overridable in the spec's ``area:`` section):

* ``A_pe`` = multiplier of the operand type + adder of the accumulator type, from M. Horowitz,
  "Computing's energy problem (and what we can do about it)", ISSCC 2014 (its table of 45 nm
  operation energies and areas):
  8-bit int mult 282, 32-bit int add 137, fp16 mult 1640, fp16 add 1360, fp32 mult 7700,
  fp32 add 4184. fp16 operands accumulate in fp32 (as GPU tensor cores do; an assumption here):
  A_pe(fp16) = 1640 + 4184 = 5824 µm²; int8 operands accumulate in int32: 282 + 137 = 419 µm²;
  fp32: 7700 + 4184 = 11884 µm². Pipeline registers and wiring are not counted (assumption:
  they scale with the PE count and cancel in relative comparisons).
* ``A_lane`` = ``A_pe`` (assumption: one multiply-add ALU per SIMD lane).
* ``A_sram_B`` = 8 bits × 0.346 µm² (Intel 45 nm 6T bit cell, Mistry et al., IEDM 2007) ÷ 0.5
  array efficiency (assumption: half of a macro is periphery) = 5.54 µm² per byte.
* ``A_pim_mult`` = (fp16 mult 1640 + accumulator adder: fp32 4184 if ``pim.acc_bits`` > 16 else
  fp16 1360) × ``dram_logic_factor``. The adder tree of n multipliers has n − 1 adders plus one
  accumulator, i.e. one adder per multiplier. ``dram_logic_factor`` = 10 is **our assumption**
  (an order of magnitude): logic built in a DRAM process has few metal layers and large, slow
  transistors, as the PIM products describe (UPMEM: F. Devaux, "The true Processing In Memory
  accelerator", Hot Chips 31, 2019; Samsung HBM-PIM: Kwon et al., ISSCC 2021, Lee et al.,
  ISCA 2021), but the value 10 is not taken from them. Sweep it if a conclusion depends on it.
* ``A_rb_B`` = 8 bits × 0.346 µm² × ``dram_logic_factor`` = 27.7 µm² per byte of page:
  one latch per bit of the extra (PIM) row buffer, sized like an SRAM cell in the DRAM process
  (assumption).

Not counted: the DRAM cell arrays (they are the capacity you buy either way; the sweep reports
``memory_capacity_bytes`` separately), the memory controller, DMA, interconnect and I/O. A GPU
system has no proxy (``None``): its die is a fixed product, not a point of this design space.
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from archsim.config import MachineConfig

#: Areas of arithmetic units at 45 nm in µm² (Horowitz, ISSCC 2014, its 45 nm table).
HOROWITZ_45NM_UM2: dict[str, float] = {
    "int8_add": 36.0, "int16_add": 67.0, "int32_add": 137.0,
    "int8_mult": 282.0, "int32_mult": 3495.0,
    "fp16_add": 1360.0, "fp32_add": 4184.0,
    "fp16_mult": 1640.0, "fp32_mult": 7700.0,
}

#: Intel 45 nm high-density 6T SRAM bit cell in µm² (Mistry et al., IEDM 2007).
SRAM_BITCELL_45NM_UM2 = 0.346


class AreaConstants(BaseModel):
    """Per-unit areas of the area proxy in µm² (45 nm-equivalent); ``None`` = the default
    derived in this module's docstring from the cited sources.

    Attributes:
        pe_um2: one systolic-array PE (multiplier + accumulator adder); default by
            ``npu.dtype_bytes``.
        vector_lane_um2: one vector-unit lane; default = ``pe_um2``.
        pim_multiplier_um2: one PIM multiplier with its share of the adder tree, already in the
            DRAM process; default = (fp16 mult + adder) × ``dram_logic_factor``.
        dram_logic_factor: area of logic in a DRAM process ÷ the same logic in a logic process
            (assumption, default 10).
        sram_um2_per_byte: on-chip SRAM including periphery (default 5.54).
        pim_row_buffer_um2_per_byte: the second (PIM) row buffer of a dual-row-buffer bank per
            byte of page (default 8 × 0.346 × ``dram_logic_factor``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    pe_um2: float | None = Field(None, gt=0)
    vector_lane_um2: float | None = Field(None, gt=0)
    pim_multiplier_um2: float | None = Field(None, gt=0)
    dram_logic_factor: float = Field(10.0, gt=0)
    sram_um2_per_byte: float = Field(8 * SRAM_BITCELL_45NM_UM2 / 0.5, gt=0)
    pim_row_buffer_um2_per_byte: float | None = Field(None, gt=0)


def pe_area_um2(dtype_bytes: int) -> float:
    """Area of one multiply-accumulate PE in µm² at 45 nm for operands of ``dtype_bytes`` bytes.

    int8 (1 B): int8 multiplier + int32 adder; fp16 (2 B) and fp32 (4 B): multiplier of that type
    + fp32 adder (accumulation in fp32). Source: Horowitz, ISSCC 2014 (its 45 nm table).

    Raises:
        ValueError: ``dtype_bytes`` not in (1, 2, 4).
    """
    t = HOROWITZ_45NM_UM2
    table = {1: t["int8_mult"] + t["int32_add"], 2: t["fp16_mult"] + t["fp32_add"],
             4: t["fp32_mult"] + t["fp32_add"]}
    if dtype_bytes not in table:
        raise ValueError(f"dtype_bytes must be one of {sorted(table)}, got {dtype_bytes!r}")
    return table[dtype_bytes]


def pim_multiplier_area_um2(acc_bits: int, dram_logic_factor: float) -> float:
    """Area of one fp16 PIM multiplier with one adder of the accumulator width, in µm²
    (45 nm-equivalent), built in a DRAM process (× ``dram_logic_factor``).

    Source of the logic areas: Horowitz, ISSCC 2014; the DRAM factor is an assumption
    (see the module docstring).
    """
    t = HOROWITZ_45NM_UM2
    adder = t["fp32_add"] if acc_bits > 16 else t["fp16_add"]
    return (t["fp16_mult"] + adder) * dram_logic_factor


def area_breakdown_mm2(cfg: MachineConfig,
                       constants: AreaConstants | None = None) -> dict[str, float] | None:
    """Area proxy of ``cfg`` by component, in mm² (45 nm-equivalent).

    Returns:
        ``{"area_npu_arrays_mm2", "area_vector_mm2", "area_sram_mm2", "area_pim_mm2",
        "area_row_buffer_mm2", "area_proxy_mm2"}`` (the last is the sum), or ``None`` for a GPU
        system (``system.engines == ("gpu",)``), which has no proxy. Engines absent from
        ``system.engines`` contribute 0.
    """
    c = constants or AreaConstants()
    engines = set(cfg.system.engines)
    if "gpu" in engines:
        return None
    npu, org = cfg.npu, cfg.memory.org
    pe = c.pe_um2 if c.pe_um2 is not None else pe_area_um2(npu.dtype_bytes)
    lane = c.vector_lane_um2 if c.vector_lane_um2 is not None else pe
    out = {"area_npu_arrays_mm2": 0.0, "area_vector_mm2": 0.0, "area_sram_mm2": 0.0,
           "area_pim_mm2": 0.0, "area_row_buffer_mm2": 0.0}
    if "npu" in engines:
        out["area_npu_arrays_mm2"] = npu.n_arrays * npu.array_height * npu.array_width * pe * 1e-6
        out["area_vector_mm2"] = npu.vector.count * npu.vector.lanes * lane * 1e-6
        out["area_sram_mm2"] = npu.scratchpad.size_bytes * c.sram_um2_per_byte * 1e-6
    if "pim" in engines:
        banks = org.channels * org.banks_per_channel
        mult = (c.pim_multiplier_um2 if c.pim_multiplier_um2 is not None
                else pim_multiplier_area_um2(cfg.pim.acc_bits, c.dram_logic_factor))
        out["area_pim_mm2"] = banks * cfg.pim.multipliers_per_bank * mult * 1e-6
        if cfg.pim.row_buffer_mode == "dual":
            rb = (c.pim_row_buffer_um2_per_byte if c.pim_row_buffer_um2_per_byte is not None
                  else 8 * SRAM_BITCELL_45NM_UM2 * c.dram_logic_factor)
            out["area_row_buffer_mm2"] = banks * org.page_size_bytes * rb * 1e-6
    out["area_proxy_mm2"] = sum(out.values())
    return out


def area_proxy_mm2(cfg: MachineConfig, constants: AreaConstants | None = None) -> float | None:
    """The area proxy of ``cfg`` in mm² (45 nm-equivalent); ``None`` for a GPU system.

    See the module docstring for the formula and the source of every constant.
    """
    b = area_breakdown_mm2(cfg, constants)
    return None if b is None else b["area_proxy_mm2"]


def static_metrics(cfg: MachineConfig, constants: AreaConstants | None = None) -> dict[str, Any]:
    """Metrics known from the configuration alone (before any simulation): the area proxy and
    its parts (mm², 45 nm-equivalent) and the device memory capacity (bytes).

    Constraints on these metrics are checked before a point runs, so an infeasible point costs
    no simulation.
    """
    out: dict[str, Any] = dict(area_breakdown_mm2(cfg, constants) or {"area_proxy_mm2": None})
    out["memory_capacity_bytes"] = (cfg.gpu.memory_bytes if "gpu" in cfg.system.engines
                                    else cfg.memory.org.capacity_bytes)
    return out


#: Metrics produced by :func:`static_metrics` (for spec validation and pre-run constraints).
STATIC_METRICS: tuple[str, ...] = (
    "area_proxy_mm2", "area_npu_arrays_mm2", "area_vector_mm2", "area_sram_mm2", "area_pim_mm2",
    "area_row_buffer_mm2", "memory_capacity_bytes")

__all__ = ["AreaConstants", "HOROWITZ_45NM_UM2", "SRAM_BITCELL_45NM_UM2", "pe_area_um2",
           "pim_multiplier_area_um2", "area_breakdown_mm2", "area_proxy_mm2", "static_metrics",
           "STATIC_METRICS"]
