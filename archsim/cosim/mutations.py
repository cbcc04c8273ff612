"""Mutations: perturb a model by one cycle or one bit; the co-simulation must then fail."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from archsim.cosim import models
from archsim.cosim.common import CosimError
from archsim.cosim.models import npu_timing_module

if TYPE_CHECKING:
    from archsim.cosim.runner import CosimJob

def _mutate_npu_cycle() -> None:
    mod = npu_timing_module()
    orig = mod.tile_latency_cycles
    mod.tile_latency_cycles = lambda h, w, n, *a, **k: orig(h, w, n, *a, **k) + 1


def _mutate_npu_preload() -> None:
    mod = npu_timing_module()
    orig = mod.weight_preload_cycles
    mod.weight_preload_cycles = lambda h, *a, **k: orig(h, *a, **k) + 1


def _mutate_npu_interval() -> None:
    mod = npu_timing_module()
    orig = mod.tile_issue_interval_cycles
    mod.tile_issue_interval_cycles = lambda n, *a, **k: orig(n, *a, **k) + 1


def _mutate_systolic_bit() -> None:
    orig = models.reference_matmul

    def flipped(a, b):
        out = orig(a, b)
        out[-1, -1] ^= 1
        return out

    models.reference_matmul = flipped


def _mutate_bank_cycle() -> None:
    """ACT -> RD one cycle longer in the bank model's compiled table (tRCDRD + 1)."""
    from archsim.memory import bank, spec

    orig = bank.compile_table

    def compile_table(cfg, mode=None, rule_names=None):
        table = orig(cfg, mode, rule_names)
        act, rd = spec.CMD_INDEX["ACT"], spec.CMD_INDEX["RD"]
        lst = table.updates["bank"][act]
        for i, (q, lat) in enumerate(lst):
            if q == rd:
                lst[i] = (q, lat + 1)
        return table

    bank.compile_table = compile_table


def _mutate_bank_faw() -> None:
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


def _mutate_pim_bit() -> None:
    """Bit 0 of every adder-tree sum flipped in the functional PIM model."""
    from archsim import functional

    orig = functional.pim_adder_tree
    functional.pim_adder_tree = lambda products: orig(products) ^ 1


def _mutate_pim_cycle() -> None:
    """The PIM pipeline fill (FILL) one cycle longer in the timing table's names."""
    from archsim.memory import spec

    orig = spec.latency_names

    def latency_names(cfg):
        names = dict(orig(cfg))
        names["FILL"] += 1
        return names

    spec.latency_names = latency_names


def _mutate_isa_bit() -> None:
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


MUTATIONS: dict[tuple[str, str], Callable[[], None]] = {
    ("isa_decoder", "bit"): _mutate_isa_bit,
    ("pim_mac", "bit"): _mutate_pim_bit,
    ("pim_mac", "cycle"): _mutate_pim_cycle,
    ("bank_dual_rowbuf", "cycle"): _mutate_bank_cycle,
    ("bank_dual_rowbuf", "faw"): _mutate_bank_faw,
    ("systolic_array", "cycle"): _mutate_npu_cycle,
    ("systolic_array", "bit"): _mutate_systolic_bit,
    ("systolic_array", "preload"): _mutate_npu_preload,
    ("systolic_array", "interval"): _mutate_npu_interval,
}
"""(block, mutation) -> a function that perturbs the model in the running process."""


def apply_mutation(job: "CosimJob") -> None:
    """Apply the job's mutation (if any) to the models in this process (test-bench side)."""
    if job.mutation is None:
        return
    try:
        MUTATIONS[(job.block, job.mutation)]()
    except KeyError:
        raise CosimError(f"no mutation '{job.mutation}' for block '{job.block}'") from None
