"""Mutations: perturb a model by one cycle or one bit; the co-simulation must then fail."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from archsim.cosim import models
from archsim.cosim.common import CosimError
from archsim.cosim.models import npu_timing_module

if TYPE_CHECKING:
    from archsim.cosim.runner import CosimJob


def _mutate_npu_cycle(job: "CosimJob") -> None:
    mod = npu_timing_module()
    orig = mod.tile_latency_cycles
    mod.tile_latency_cycles = lambda h, w, n, *a, **k: orig(h, w, n, *a, **k) + 1


def _mutate_npu_preload(job: "CosimJob") -> None:
    mod = npu_timing_module()
    orig = mod.weight_preload_cycles
    mod.weight_preload_cycles = lambda h, *a, **k: orig(h, *a, **k) + 1


def _mutate_npu_interval(job: "CosimJob") -> None:
    mod = npu_timing_module()
    orig = mod.tile_issue_interval_cycles
    mod.tile_issue_interval_cycles = lambda n, *a, **k: orig(n, *a, **k) + 1


def _mutate_systolic_bit(job: "CosimJob") -> None:
    orig = models.reference_matmul

    def flipped(a, b):
        out = orig(a, b)
        out[-1, -1] ^= 1
        return out

    models.reference_matmul = flipped


def _mutate_table(level: str, prev: str, nxt: str, delta: int = 1) -> None:
    """``prev -> nxt`` at ``level`` ``delta`` cycles longer in the compiled constraint table
    (every rule relating the pair there; a latency of k gets ``delta`` added to its value).
    Patches :func:`archsim.memory.bank.compile_table`, through which the bank model and the
    channel reference get their table."""
    from archsim.memory import bank, spec

    orig = bank.compile_table
    p, q = spec.CMD_INDEX[prev], spec.CMD_INDEX[nxt]

    def compile_table(cfg, mode=None, rule_names=None):
        table = orig(cfg, mode, rule_names)
        lst = table.updates[level][p]
        for i, (qq, lat) in enumerate(lst):
            if qq == q:
                lst[i] = (qq, lat + delta if isinstance(lat, int)
                          else (lambda k, _f=lat: _f(k) + delta))
        return table

    bank.compile_table = compile_table


def _mutate_bank_cycle(job: "CosimJob") -> None:
    """ACT -> RD one cycle longer in the bank model's compiled table (tRCDRD + 1)."""
    _mutate_table("bank", "ACT", "RD")


def _mutate_channel_gemv(job: "CosimJob") -> None:
    """A PIM_GEMV's occupancy (GEMV_BUSY) one cycle longer before the next PIM_GEMV."""
    _mutate_table("channel", "PIM_GEMV", "PIM_GEMV")


def _mutate_rank_trfc(job: "CosimJob") -> None:
    """REF -> ACT one cycle longer in the rank rules (tRFC + 1)."""
    _mutate_table("rank", "REF", "ACT")


def _mutate_bankgroup_tccd_l(job: "CosimJob") -> None:
    """RD -> RD in one bank group one cycle longer (tCCD_L + 1)."""
    _mutate_table("bankgroup", "RD", "RD")


def _mutate_replay_early(job: "CosimJob") -> None:
    """Replays: every logged command that a timing rule (not the one-command bus) held back
    is also offered one cycle before its earliest legal cycle, as if the log said so; the
    RTL must refuse each (the test bench reads ``job.mutation``)."""


def _mutate_bank_faw(job: "CosimJob") -> None:
    """The tFAW window one cycle longer in the bank model's compiled table."""
    from archsim.memory import bank

    orig = bank.compile_table

    def compile_table(cfg, mode=None, rule_names=None):
        table = orig(cfg, mode, rule_names)
        for lv, wins in table.windows.items():
            wins[:] = [(n, c, m, span + 1 if n == "tFAW" else span, w)
                       for (n, c, m, span, w) in wins]
        return table

    bank.compile_table = compile_table


def _mutate_pim_bit(job: "CosimJob") -> None:
    """Bit 0 of every adder-tree sum flipped in the functional PIM model (of the integer, or
    of the binary32 bit pattern of a floating-point sum)."""
    from archsim import functional

    import numpy as np

    orig = functional.pim_adder_tree

    def flipped(products):
        s = np.asarray(orig(products))
        if s.dtype.kind == "f":   # the fp datapath: bit 0 of the binary32 pattern
            return (s.astype(np.float32).view(np.uint32) ^ np.uint32(1)).view(np.float32)
        return s ^ 1

    functional.pim_adder_tree = flipped


def _mutate_pim_cycle(job: "CosimJob") -> None:
    """The PIM pipeline fill (FILL) one cycle longer in the timing table's names."""
    from archsim.memory import spec

    orig = spec.latency_names

    def latency_names(cfg):
        names = dict(orig(cfg))
        names["FILL"] += 1
        return names

    spec.latency_names = latency_names


def _mutate_pim_order(job: "CosimJob") -> None:
    """The adder tree replaced by a sequential sum in lane order (((p0+p1)+p2)+...), the
    accumulation order a dot-product unit without a tree would have."""
    from archsim import functional

    def sequential(products):
        p = products
        s = p[..., 0]
        for i in range(1, p.shape[-1]):
            s = s + p[..., i]
        return s

    functional.pim_adder_tree = sequential


def _mutate_pim_subnormal(job: "CosimJob") -> None:
    """Subnormal operands of the storage type read as zero (denormals-are-zero, a common FPU
    shortcut) before the step multiplies them."""
    import numpy as np

    from archsim import functional
    from archsim.cosim.models import pim_fp_format

    exp_w, _ = pim_fp_format(job.dtype or "")
    tiny = np.float32(2.0 ** (2 - (1 << (exp_w - 1))))   # smallest normal of the type
    orig = functional.pim_comp_step

    def daz(x):
        x = np.asarray(x)
        return np.where(np.abs(x) < tiny, x * np.float32(0), x)

    functional.pim_comp_step = lambda acc, row, gbuf: orig(acc, daz(row), daz(gbuf))


def _mutate_pim_nan(job: "CosimJob") -> None:
    """The canonical NaN of a COMP step changed to x86's default NaN (0xFFC00000, sign set)."""
    from archsim import functional

    functional.PIM_QNAN_BITS = 0xFFC00000


def _mutate_pim_inf(job: "CosimJob") -> None:
    """Infinite step results saturated to the largest finite fp32 value (of their sign)."""
    import numpy as np

    from archsim import functional

    orig = functional.pim_comp_step
    big = np.finfo(np.float32).max

    def saturated(acc, row, gbuf):
        out = orig(acc, row, gbuf)
        return np.where(np.isinf(out), np.copysign(big, out), out).astype(out.dtype)

    functional.pim_comp_step = saturated


def _mutate_isa_bit(job: "CosimJob") -> None:
    """Bit 0 of the last operand of every decoded instruction flipped in isa.encoding.decode."""
    from isa import encoding

    orig = encoding.decode

    def decode(word):
        ins = orig(word)
        if not ins.codes:
            return ins
        codes = list(ins.codes)
        codes[-1] ^= 1
        return encoding.Instruction.from_codes(ins.spec, codes)

    encoding.decode = decode


MUTATIONS: dict[tuple[str, str], Callable[["CosimJob"], None]] = {
    ("isa_decoder", "bit"): _mutate_isa_bit,
    ("pim_mac", "bit"): _mutate_pim_bit,
    ("pim_mac", "cycle"): _mutate_pim_cycle,
    ("pim_mac_fp", "bit"): _mutate_pim_bit,
    ("pim_mac_fp", "cycle"): _mutate_pim_cycle,
    ("pim_mac_fp", "order"): _mutate_pim_order,
    ("pim_mac_fp", "subnormal"): _mutate_pim_subnormal,
    ("pim_mac_fp", "nan"): _mutate_pim_nan,
    ("pim_mac_fp", "inf"): _mutate_pim_inf,
    ("bank_dual_rowbuf", "cycle"): _mutate_bank_cycle,
    ("bank_dual_rowbuf", "faw"): _mutate_bank_faw,
    ("pim_channel", "cycle"): _mutate_bank_cycle,
    ("pim_channel", "faw"): _mutate_bank_faw,
    ("pim_channel", "gemv"): _mutate_channel_gemv,
    ("pim_channel", "trfc"): _mutate_rank_trfc,
    ("pim_channel", "tccd_l"): _mutate_bankgroup_tccd_l,
    ("pim_channel_replay", "early"): _mutate_replay_early,
    ("pim_channel_replay", "cycle"): _mutate_bank_cycle,
    ("pim_channel_replay", "gemv"): _mutate_channel_gemv,
    ("pim_mac_fp_replay", "bit"): _mutate_pim_bit,
    ("pim_mac_fp_replay", "cycle"): _mutate_pim_cycle,
    ("systolic_array", "cycle"): _mutate_npu_cycle,
    ("systolic_array", "bit"): _mutate_systolic_bit,
    ("systolic_array", "preload"): _mutate_npu_preload,
    ("systolic_array", "interval"): _mutate_npu_interval,
}
"""(block, mutation) -> a function that perturbs the model in the running process (it gets
the run's job: the subnormal mutation needs the operand type)."""


def apply_mutation(job: "CosimJob") -> None:
    """Apply the job's mutation (if any) to the models in this process (test-bench side)."""
    if job.mutation is None:
        return
    try:
        mutate = MUTATIONS[(job.block, job.mutation)]
    except KeyError:
        raise CosimError(f"no mutation '{job.mutation}' for block '{job.block}'") from None
    mutate(job)
