"""The Verilog blocks of ``rtl/``: sources, test benches, variants (parameter sets), mutations."""
from __future__ import annotations

from dataclasses import dataclass

from archsim.cosim.common import CosimError


@dataclass(frozen=True)
class Variant:
    """One parameter set of a block: config overrides applied on top of the chosen config.

    ``dtype`` is the operand type of a floating-point block (``fp16``/``bf16``): a property of
    the workload a PIM unit computes on, not a machine key, so the variant carries it.
    ``workload`` names the real stimulus of a replay block (a key of
    :data:`archsim.cosim.replay.REPLAY_WORKLOADS`); ``config`` the preset the variant is
    defined on (used unless the run names another configuration: ``--config`` replaces it);
    ``default`` False keeps a long variant out of a run that names no variant (it runs when
    named with ``--variant``).
    """

    name: str
    overrides: tuple[str, ...] = ()
    description: str = ""
    dtype: str | None = None
    workload: str | None = None
    config: str | None = None
    default: bool = True


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
    "pim_channel": Block(
        name="pim_channel", toplevel="pim_channel", sources=("pim_channel.v",),
        tb_module="tb_pim_channel",
        variants=(Variant("dual", ("pim.row_buffer_mode=dual",),
                          "NeuPIMs: 2 ranks x 4 bank groups x 4 banks, dual row buffers"),
                  Variant("single", ("pim.row_buffer_mode=single",),
                          "blocked mode: one row buffer, PIM_ENTER / PIM_EXIT"),
                  Variant("per_bank", ("memory.refresh.mode=per_bank",),
                          "per-bank refresh (REFpb, tRFCpb, tRREFD)"),
                  Variant("hbm3", ("memory.kind=hbm3",), "HBM3 (JESD238 tRTW, tPPD; BL 2)"),
                  Variant("r4_bg2_b2", ("memory.org.ranks=4", "memory.org.bank_groups=2",
                                        "memory.org.banks_per_group=2"),
                          "another organisation: 4 ranks of 2 x 2 banks (G_ACT weighs 2)")),
        mutations=("cycle", "faw", "gemv", "trfc", "tccd_l"),
        model="archsim.memory.bank timing nodes composed as archsim.memory.controller."
              "ChannelController composes them"),
    "pim_channel_replay": Block(
        name="pim_channel_replay", toplevel="pim_channel", sources=("pim_channel.v",),
        tb_module="tb_pim_channel_replay",
        variants=(Variant("tiny_dual", (), "tiny-gpt (2 layers, 16 requests) on neupims",
                          workload="tiny", config="neupims"),
                  Variant("tiny_blocked", (), "tiny-gpt on npu-pim-blocked (PIM_ENTER/EXIT)",
                          workload="tiny", config="npu-pim-blocked"),
                  Variant("tiny_closed_pb", ("memory.controller.page_policy=closed",
                                             "memory.refresh.mode=per_bank"),
                          "tiny-gpt on neupims with closed pages (RDA/WRA) and per-bank "
                          "refresh (REFpb)", workload="tiny", config="neupims"),
                  Variant("gpt3_neupims", (), "GPT3-7B layer 0, clb-0 batch, neupims: the "
                          "busiest channel (>150 k commands)", workload="gpt3-clb0",
                          config="neupims", default=False),
                  Variant("gpt3_blocked", (), "GPT3-7B layer 0, clb-0 batch, npu-pim-blocked: "
                          "the busiest channel (>110 k commands)", workload="gpt3-clb0",
                          config="npu-pim-blocked", default=False)),
        mutations=("early", "cycle", "gemv"),
        model="the simulator's command log of one channel, checked against the channel "
              "controller's timing nodes"),
    "pim_mac_fp_replay": Block(
        name="pim_mac_fp_replay", toplevel="pim_mac_fp", sources=("pim_mac_fp.v", "pim_delay.v"),
        tb_module="tb_pim_mac_fp_replay",
        variants=(Variant("fp16", (), "tiny-gpt golden validation in fp16 on neupims: every "
                          "COMP step of channel 0", dtype="fp16", workload="tiny-gpt"),
                  Variant("bf16", (), "the same in bf16", dtype="bf16", workload="tiny-gpt")),
        mutations=("bit", "cycle"),
        model="the accumulators of a functional run (archsim.functional) and pim_comp_step"),
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
