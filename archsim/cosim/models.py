"""Adapters to the simulator's own models, which the test benches check the RTL against.

Every model is looked up at call time, so a mutation that monkeypatches the model module (see
:mod:`archsim.cosim.mutations`) is seen by every caller.
"""
from __future__ import annotations

from archsim.cosim.common import CosimError


def load_cosim_config(config: str = "neupims", overrides: tuple[str, ...] | list[str] = ()):
    """The machine configuration a co-simulation uses (a preset or file plus overrides)."""
    from archsim.config import load_config

    return load_config(config, list(overrides))


def npu_timing_module():
    """The module of the NPU model the simulator uses (:mod:`archsim.npu.timing`), with
    ``tile_latency_cycles(H, W, n_rows)``, ``tile_issue_interval_cycles(n_rows)`` and
    ``weight_preload_cycles(H)``: the benches and the mutations read the rules from it."""
    from archsim.npu import timing

    return timing


def npu_tile_latency_cycles(h: int, w: int, n_rows: int) -> int:
    """Cycles of one weight-stationary tile of ``n_rows`` rows after weight preload, from the
    NPU model the simulator uses (DESIGN §3: ``H + W - 2 + max(n, 4)``)."""
    return int(npu_timing_module().tile_latency_cycles(h, w, n_rows))


def npu_min_rows(cfg) -> int:
    """The minimum rows a tile is charged for, read off the NPU model
    (``tile_issue_interval_cycles(1)``, 4 in the reference), after checking that the model's
    rules have the shape the RTL implements. Drives ``MIN_ROWS``. Raises CosimError if not."""
    h, w = cfg.npu.array_height, cfg.npu.array_width
    mod = npu_timing_module()
    m = int(mod.tile_issue_interval_cycles(1))
    fill = npu_tile_latency_cycles(h, w, 1) - m
    ok = m >= 1 and int(mod.weight_preload_cycles(h)) == h and all(
        npu_tile_latency_cycles(h, w, n) == fill + max(n, m)
        and int(mod.tile_issue_interval_cycles(n)) == max(n, m) for n in range(1, m + 3))
    if not ok or fill != h + w - 2:
        raise CosimError(f"the NPU model's tile timing is not preload H, latency "
                         f"H + W - 2 + max(n, MIN_ROWS), interval max(n, MIN_ROWS) for a "
                         f"{h}x{w} array: the systolic_array RTL cannot be parameterised to it")
    return m


def pim_operand_bits(cfg) -> int:
    """Bit width of one PIM operand in the integer datapath: 16 (the fp16 element width)."""
    return 16


def pim_fill_cycles(cfg) -> int:
    """The COMP pipeline depth the PIM timing table assumes (``FILL`` of
    :func:`archsim.memory.spec.latency_names`, ``pim.gemv_pipeline_fill``, 6 in the reference):
    the cycles from a COMP step entering ``pim_mac`` to its sum being in the accumulator."""
    from archsim.memory import spec

    return int(spec.latency_names(cfg)["FILL"])


def wrap_signed(value: int, bits: int) -> int:
    """``value`` reduced to a ``bits``-bit two's complement integer."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def pim_mac_step(acc: int, bank_burst, gbuf_burst, first: bool, acc_bits: int) -> int:
    """One COMP step of one bank in the fixed-point datapath of ``pim_mac``.

    The arithmetic is the simulator's own :func:`archsim.functional.pim_comp_step` (products,
    pairwise adder tree, accumulate) applied to int64 arrays of one bank, exact; the only
    addition here is the accumulator's width: the result is wrapped to ``acc_bits`` two's
    complement bits (``pim.acc_bits``), which commutes with every addition, so it equals the
    RTL's modulo-2^ACC_W datapath bit for bit. ``first`` starts a new dot product
    (accumulator from 0, as after READRES).
    """
    import numpy as np

    from archsim import functional

    a = np.array([0 if first else acc], dtype=np.int64)
    out = functional.pim_comp_step(a, np.array([list(bank_burst)], dtype=np.int64),
                                   np.array(list(gbuf_burst), dtype=np.int64))
    return wrap_signed(int(out[0]), acc_bits)


def reference_matmul(a, b):
    """The value reference of the systolic array: numpy's matmul in int64 (exact)."""
    import numpy as np

    return np.matmul(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))


PIM_FP_FORMATS: dict[str, tuple[int, int]] = {"fp16": (5, 10), "bf16": (8, 7)}
"""Operand formats of ``pim_mac_fp``: dtype -> (exponent bits, fraction bits), the layouts of
:func:`archsim.functional.to_storage` (IEEE binary16; bf16 = the upper half of binary32)."""


def pim_fp_format(dtype: str) -> tuple[int, int]:
    """(EXP_W, MAN_W) of a PIM operand dtype. Raises CosimError naming the allowed ones."""
    try:
        return PIM_FP_FORMATS[dtype]
    except KeyError:
        raise CosimError(f"pim_mac_fp has no operand type '{dtype}'; allowed: "
                         f"{', '.join(PIM_FP_FORMATS)}") from None


def pim_fp_mac_step(acc_bits: int, bank_bits, gbuf_bits, first: bool,
                    dtype: str) -> tuple[int, int]:
    """One COMP step of one bank in the floating-point datapath of ``pim_mac_fp``.

    Args:
        acc_bits: the bank's fp32 accumulator as binary32 bits (ignored when ``first``).
        bank_bits, gbuf_bits: ``lanes`` storage-type elements each (fp16 or bf16 bit
            patterns, :func:`archsim.functional.to_storage` layout) of the open row's column
            burst and of the global buffer.
        first: this step starts a new dot product (accumulator from +0.0, as after READRES).
        dtype: ``fp16`` or ``bf16``.

    Returns:
        ``(acc, res)``: the new accumulator (binary32 bits) and it rounded to ``dtype``
        (storage bits), what READRES writes.

    The arithmetic is the simulator's own: :func:`archsim.functional.from_storage` (operands
    to float32), :func:`archsim.functional.pim_comp_step` (products, pairwise adder tree,
    accumulate, special values as its docstring defines them) and
    :func:`archsim.functional.to_storage` (READRES rounding), looked up at call time.
    """
    import numpy as np

    from archsim import functional

    def values(bits):
        return functional.from_storage(np.array(list(bits), dtype=np.uint16).view(
            np.float16) if dtype == "fp16" else np.array(list(bits), dtype=np.uint16), dtype)

    acc = np.array([0 if first else acc_bits], dtype=np.uint32).view(np.float32)
    with np.errstate(all="ignore"):   # overflow and inf - inf are part of the stimulus
        out = functional.pim_comp_step(acc, values(bank_bits)[None, :], values(gbuf_bits))
        res = functional.to_storage(out, dtype)
    acc_out = int(np.asarray(out, dtype=np.float32).view(np.uint32)[0])
    res_bits = int(np.asarray(res).view(np.uint16)[0])
    return acc_out, res_bits


BANK_COMMANDS: tuple[str, ...] = ("NOP", "ACT", "RD", "WR", "PRE", "G_ACT", "COMP", "PIM_PRE")
"""Command codes of ``bank_dual_rowbuf``'s ``cmd`` port (index = code), in the names of
:mod:`archsim.memory.spec` (the RTL calls G_ACT ``PIM_ACT``)."""
BANK_RTL_NAMES: tuple[str, ...] = ("NOP", "ACT", "RD", "WR", "PRE", "PIM_ACT", "COMP",
                                   "PIM_PRE")


def bank_model(cfg):
    """The simulator's per-bank timing model for ``cfg`` (stand-alone: every level's rules)."""
    from archsim.memory import bank

    return bank.BankTimingModel(cfg)


def isa_engines() -> list:
    """Engines of the ISA in the order of their ``engine`` code (index)."""
    from isa.spec import Engine

    return list(Engine)


def isa_model_decode(word: int):
    """The simulator's decoder (:func:`isa.encoding.decode`), looked up at call time."""
    from isa import encoding

    return encoding.decode(word)


def isa_model_encode(spec, codes) -> int:
    """The simulator's encoder applied to ``codes`` of ``spec`` (:func:`isa.encoding.encode`)."""
    from isa import encoding

    return encoding.encode(encoding.Instruction.from_codes(spec, codes))
