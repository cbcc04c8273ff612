"""Config sections of the energy, power and area model: ``energy:`` and ``area:``.

A leaf of the config layer (imported by :mod:`archsim.config`; imports nothing of the project
but :mod:`archsim.errors`). Every constant is an object ``{value, source}`` — plus ``node_nm``
(and for energies ``vdd_v``) when it is a CMOS-logic or SRAM figure given at another process
node than the NPU's (``npu.process``): the model scales it with the Stillmaker & Baas equations
(:mod:`archsim.energy.technology`). Nothing has a default: a missing constant is an error naming
its key, a negative one an error naming its key and the allowed range, and a source shorter
than a few words is rejected (``tests/test_energy_sources.py`` walks the presets too).

Units are in the key names: ``*_pj`` picojoules per action, ``*_pj_per_byte``, ``*_w`` watts,
``*_w_per_mm2``, ``*_um2`` square micrometres, ``*_fraction`` a ratio.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

SOURCE_MIN_CHARS = 12
"""A ``source`` shorter than this is rejected (it cannot name a paper, table and rule)."""


class _Section(BaseModel):
    """Base of the sections here: immutable, unknown keys rejected (as in archsim.config)."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)


class Constant(_Section):
    """A constant with its source: ``{value, source}`` (value >= 0)."""

    value: float = Field(ge=0, description="the constant, in the unit its key names")
    source: str = Field(min_length=SOURCE_MIN_CHARS,
                        description="paper/datasheet, table, and the rule applied to it")


class LogicEnergy(Constant):
    """An energy of CMOS logic or SRAM given at process ``node_nm`` and supply ``vdd_v``; the
    model scales it to ``npu.process`` (Stillmaker & Baas, Integration 2017)."""

    node_nm: float = Field(ge=7, le=130, description="process node of the value (nm)")
    vdd_v: float = Field(gt=0, le=2, description="supply voltage of the value (V)")


class LogicArea(Constant):
    """An area of CMOS logic or SRAM given at process ``node_nm``; scaled to ``npu.process``."""

    node_nm: float = Field(ge=7, le=130, description="process node of the value (nm)")


class SramEnergy(_Section):
    """Energy of one SRAM access by bank capacity (CACTI-style: grows with the bank).

    ``access_pj[i]`` is one ``access_bytes``-wide read or write of a bank of ``bank_bytes[i]``
    bytes; other capacities are interpolated (and extrapolated) linearly in log(size) –
    log(energy). Given at ``node_nm`` / ``vdd_v``, scaled like :class:`LogicEnergy`.
    """

    bank_bytes: tuple[int, ...] = Field(min_length=2, description="bank capacities, ascending")
    access_pj: tuple[float, ...] = Field(min_length=2, description="pJ per access, same order")
    access_bytes: int = Field(ge=1, le=1024, description="bytes per access")
    write_to_read: float = Field(gt=0, le=10, description="write energy ÷ read energy")
    node_nm: float = Field(ge=7, le=130)
    vdd_v: float = Field(gt=0, le=2)
    source: str = Field(min_length=SOURCE_MIN_CHARS)

    @model_validator(mode="after")
    def _table(self) -> "SramEnergy":
        if len(self.bank_bytes) != len(self.access_pj):
            raise ValueError(f"bank_bytes ({len(self.bank_bytes)} values) and access_pj "
                             f"({len(self.access_pj)}) must have the same length")
        if any(b <= a for a, b in zip(self.bank_bytes, self.bank_bytes[1:])):
            raise ValueError(f"bank_bytes {list(self.bank_bytes)} must be strictly ascending")
        if any(e <= 0 for e in self.access_pj) or any(b < 1 for b in self.bank_bytes):
            raise ValueError("bank_bytes and access_pj must be > 0")
        return self


#: The vector ops (the same tuple as :data:`archsim.config.VECTOR_OPS`, checked there).
VECTOR_OP_NAMES: tuple[str, ...] = ("add", "mul", "scale", "layernorm", "rmsnorm", "softmax",
                                    "gelu", "silu", "rope", "copy", "dot")


class VectorOpCost(_Section):
    """Arithmetic operations per element per pass of each vector op (``ops``), and their
    source. Every op of :data:`VECTOR_OP_NAMES` must be listed, each >= 0."""

    ops: dict[str, float]
    source: str = Field(min_length=SOURCE_MIN_CHARS)

    @model_validator(mode="after")
    def _all_ops(self) -> "VectorOpCost":
        missing = [o for o in VECTOR_OP_NAMES if o not in self.ops]
        extra = [o for o in self.ops if o not in VECTOR_OP_NAMES]
        if missing or extra:
            raise ValueError(f"ops must list exactly {list(VECTOR_OP_NAMES)}"
                             + (f"; missing {missing}" if missing else "")
                             + (f"; unknown {extra}" if extra else ""))
        bad = [f"ops.{k} must be >= 0 (got {v})" for k, v in self.ops.items() if v < 0]
        if bad:
            raise ValueError("; ".join(bad))
        return self


class NpuEnergy(_Section):
    """Per-action energies of the NPU die (scaled to ``npu.process``)."""

    mac_pj: LogicEnergy = Field(description="one multiply-accumulate of a systolic-array PE")
    vector_op_pj: LogicEnergy = Field(description="one fp16 arithmetic op of a vector lane")
    vector_ops_per_element: VectorOpCost
    sram: SramEnergy
    leakage_w_per_mm2: Constant = Field(description="static power per mm² of NPU logic+SRAM")


class PimEnergy(_Section):
    """Energy of the PIM COMP step beyond the IDD method (per bank taking part).

    One COMP on one bank reads ``multipliers_per_bank`` elements from the bank's (PIM) row
    buffer — the bank-local part of a column read only — and runs the multipliers and the
    adder tree: ``comp_pj = rd_pj × (COMP bytes ÷ burst bytes) × column_access_fraction
    + multipliers_per_bank × mac_pj`` (see :mod:`archsim.energy.model`).
    """

    column_access_fraction: Constant = Field(
        description="energy of the bank-local part of a column read ÷ a whole column read")
    mac_pj: Constant = Field(description="one fp16 multiply + accumulate of a PIM unit (DRAM "
                                         "process, not scaled)")


class GpuPower(_Section):
    """Board power of the GPU baseline: ``idle + (max − idle) × activity`` per device."""

    idle_w: Constant = Field(description="board power with the model resident, no kernel")
    max_w: Constant = Field(description="board power limit (TDP)")

    @model_validator(mode="after")
    def _order(self) -> "GpuPower":
        if self.max_w.value < self.idle_w.value:
            raise ValueError(f"max_w ({self.max_w.value:g} W) must be >= idle_w "
                             f"({self.idle_w.value:g} W)")
        return self


class EnergyConfig(_Section):
    """The energy table of a machine (Accelergy-style: actions × energy per action)."""

    npu: NpuEnergy
    pim: PimEnergy
    hbm_io_pj_per_byte: Constant = Field(
        description="HBM interface (PHY + interposer) per byte on the external bus, beyond "
                    "the IDD method's device energy")
    link_pj_per_byte: Constant = Field(
        description="device-to-device link per byte sent (all-reduce, pipeline hand-off)")
    gpu: GpuPower


class AreaConfig(_Section):
    """Per-unit areas of the area model (:mod:`archsim.energy.area`).

    NPU units (``pe_um2``, ``vector_lane_um2``, ``sram_um2_per_byte``) are CMOS figures at
    ``node_nm``, scaled to ``npu.process``. PIM units are built in the DRAM process: their logic
    area at 45 nm-logic density × ``dram_logic_factor`` (not scaled by ``npu.process``).
    """

    pe_um2: LogicArea
    vector_lane_um2: LogicArea
    sram_um2_per_byte: LogicArea
    pim_multiplier_um2: Constant = Field(description="one PIM multiplier with its adder-tree "
                                                     "share, at 45 nm logic density")
    pim_row_buffer_um2_per_byte: Constant = Field(description="latches of the second row "
                                                              "buffer per byte of page, at 45 "
                                                              "nm SRAM density")
    dram_logic_factor: Constant = Field(description="area of logic in a DRAM process ÷ the "
                                                    "same logic at 45 nm")


class ProcessConfig(_Section):
    """The logic process of the NPU die: what LogicEnergy/LogicArea constants scale to."""

    node_nm: float = Field(7.0, ge=7, le=130, description="process node (nm)")
    vdd_v: float = Field(0.7, gt=0, le=2, description="supply voltage (V)")
    source: str = Field("assumption: a 7 nm (TSMC N7 class) die at the 0.7 V nominal of "
                        "Stillmaker & Baas' 7 nm model, the node of the A100 it is compared with",
                        min_length=SOURCE_MIN_CHARS)


__all__ = ["Constant", "LogicEnergy", "LogicArea", "SramEnergy", "VectorOpCost", "NpuEnergy",
           "PimEnergy", "GpuPower", "EnergyConfig", "AreaConfig", "ProcessConfig",
           "SOURCE_MIN_CHARS", "VECTOR_OP_NAMES"]
