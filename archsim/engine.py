"""Former home of the NPU executor, now :mod:`archsim.npu.executor` (re-exported here)."""
from archsim.npu.executor import (_PIM_KINDS, _PIM_RID_BASE, _REC_SHIFT, Executor,  # noqa: F401
                                  channel_interleave_bytes, run_timing)

__all__ = ["Executor", "run_timing"]
