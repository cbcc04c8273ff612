"""The Verilog blocks of ``rtl/``: sources, test benches, variants (parameter sets), mutations."""
from __future__ import annotations

from dataclasses import dataclass

from archsim.cosim.common import CosimError


@dataclass(frozen=True)
class Variant:
    """One parameter set of a block: config overrides applied on top of the chosen config.

    ``dtype`` is the operand type of a floating-point block (``fp16``/``bf16``): a property of
    the workload a PIM unit computes on, not a machine key, so the variant carries it.
    """

    name: str
    overrides: tuple[str, ...] = ()
    description: str = ""
    dtype: str | None = None


@dataclass(frozen=True)
class Block:
    """A Verilog block, its sources (relative to ``rtl/``), test bench and variants.

    Attributes:
        name: block name used on the command line.
        toplevel: Verilog top module.
        sources: Verilog files, relative to ``rtl/``.
        tb_module: cocotb test module in ``rtl/tests``.
        variants: parameter sets run by default (the first is the block's reference set).
        mutations: names of the model perturbations its mutation test may apply
            (see :data:`MUTATIONS`).
        includes: include directories relative to ``rtl/``.
        model: where the Python model it is checked against lives (for reports).
    """

    name: str
    toplevel: str
    sources: tuple[str, ...]
    tb_module: str
    variants: tuple[Variant, ...]
    mutations: tuple[str, ...]
    includes: tuple[str, ...] = ()
    model: str = ""


BLOCKS: dict[str, Block] = {
    "pim_mac": Block(
        name="pim_mac", toplevel="pim_mac", sources=("pim_mac.v", "pim_delay.v"),
        tb_module="tb_pim_mac",
        variants=(Variant("l16", (), "reference: 16 lanes, 16-bit operands, 32-bit accumulator"),
                  Variant("l8_acc24", ("pim.multipliers_per_bank=8", "pim.acc_bits=24"),
                          "8 lanes (a padding pipeline stage), 24-bit wrapping accumulator")),
        mutations=("bit", "cycle"),
        model="archsim.functional.pim_comp_step + FILL of archsim.memory.spec"),
    "pim_mac_fp": Block(
        name="pim_mac_fp", toplevel="pim_mac_fp", sources=("pim_mac_fp.v", "pim_delay.v"),
        tb_module="tb_pim_mac_fp",
        variants=(Variant("fp16", (), "16 lanes of fp16 (exact fp32 products), fp32 tree and "
                          "accumulator", dtype="fp16"),
                  Variant("bf16", (), "16 lanes of bf16 (products round in fp32's "
                          "subnormal and overflow range)", dtype="bf16"),
                  Variant("bf16_l12", ("pim.multipliers_per_bank=12",),
                          "12 lanes: an odd tree level padded with +0.0", dtype="bf16")),
        mutations=("bit", "cycle", "order", "subnormal", "nan", "inf"),
        model="archsim.functional.pim_comp_step (fp32) + to_storage (READRES) + FILL"),
    "systolic_array": Block(
        name="systolic_array", toplevel="systolic_array",
        sources=("systolic_array.v", "systolic_pe.v"), tb_module="tb_systolic_array",
        variants=(Variant("4x4", ("npu.array_height=4", "npu.array_width=4")),
                  Variant("8x8", ("npu.array_height=8", "npu.array_width=8")),
                  Variant("4x8", ("npu.array_height=4", "npu.array_width=8"))),
        mutations=("cycle", "bit", "preload", "interval"),
        model="archsim.npu.timing (tile latency, issue interval, preload) + numpy matmul"),
    "bank_dual_rowbuf": Block(
        name="bank_dual_rowbuf", toplevel="bank_dual_rowbuf", sources=("bank_dual_rowbuf.v",),
        tb_module="tb_bank_dual_rowbuf",
        variants=(Variant("dual", ("pim.row_buffer_mode=dual",)),
                  Variant("single", ("pim.row_buffer_mode=single",))),
        mutations=("cycle", "faw"),
        model="archsim.memory.bank.BankTimingModel"),
    "isa_decoder": Block(
        name="isa_decoder", toplevel="isa_decoder", sources=("isa_decoder.v",),
        tb_module="tb_isa_decoder", includes=("generated",),
        variants=(Variant("default", ()),),
        mutations=("bit",),
        model="isa.encoding.decode over isa.spec.SPEC"),
}


def get_block(name: str) -> Block:
    """The :class:`Block` called ``name``. Raises CosimError listing the known blocks."""
    try:
        return BLOCKS[name]
    except KeyError:
        raise CosimError(f"unknown RTL block '{name}'; known: {', '.join(BLOCKS)}") from None


def get_variant(block: Block, name: str | None) -> Variant:
    """A variant of ``block`` by name (``None``: the first). Raises CosimError if unknown."""
    if name is None:
        return block.variants[0]
    for v in block.variants:
        if v.name == name:
            return v
    raise CosimError(f"block '{block.name}' has no variant '{name}'; "
                     f"known: {', '.join(v.name for v in block.variants)}")
