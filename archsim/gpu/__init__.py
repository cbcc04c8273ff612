"""The GPU-only baseline: a per-kernel model (``roofline`` or ``calibrated`` mode,
:mod:`~archsim.gpu.roofline`) and its calibration against published measurements of serving
stacks on A100 and H100 (:mod:`~archsim.gpu.calibration`). Energy: board power
(:func:`archsim.energy.model.gpu_iteration_energy`)."""
from __future__ import annotations

from archsim.gpu.roofline import (ATTENTION_KINDS, COLLECTIVE_KINDS, FEATURES, MATRIX_KINDS,
                                  STAGE_OF_ROLE, VECTOR_KINDS, GpuCostModel, Kernel,
                                  KernelEfficiency, batch_features, describe_gpu_model,
                                  graph_kernels, kernel_class, kernel_efficiency,
                                  kernel_times_s, ring_allreduce_time_s, simulate_gpu_iteration)

__all__ = ["ATTENTION_KINDS", "COLLECTIVE_KINDS", "FEATURES", "MATRIX_KINDS", "STAGE_OF_ROLE",
           "VECTOR_KINDS", "GpuCostModel", "Kernel", "KernelEfficiency", "batch_features",
           "describe_gpu_model", "graph_kernels", "kernel_class", "kernel_efficiency",
           "kernel_times_s", "ring_allreduce_time_s", "simulate_gpu_iteration"]
