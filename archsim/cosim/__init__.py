"""RTL co-simulation: run the Verilog blocks of ``rtl/`` against the simulator's own models.

Each block (``pim_mac``, ``pim_mac_fp``, ``systolic_array``, ``bank_dual_rowbuf``,
``pim_channel``, ``isa_decoder``) is built with Icarus Verilog or Verilator through
``cocotb_tools.runner`` and driven by a cocotb test bench (``rtl/tests/tb_<block>.py``) that feeds
the same seeded random stimulus to the Verilog and to the Python model the simulator uses (never a
copy written for the test), comparing every output and every accept/reject decision cycle for
cycle. The replay blocks drive a Verilog block with real stimulus instead
(:mod:`~archsim.cosim.replay`): ``pim_channel_replay`` the memory command log of one channel of
a cycle-level run, ``pim_mac_fp_replay`` the COMP operands of a functional run.

One source of truth: :func:`verilog_parameters` derives every Verilog parameter from the machine
configuration (:mod:`archsim.config`), the timing table (:mod:`archsim.memory.spec`), the NPU
timing model and the ISA table; the test bench rebuilds the model from the same configuration.
The ISA decoder's field constants are generated from the ISA table
(:func:`generate_isa_fields_vh`, committed as ``rtl/generated/isa_fields.vh``).

How a run flows:

1. :func:`build` compiles one parameter set into its own directory under the build root, named
   by a hash of the block, its parameters and the text of every source (a stale ``sim.vvp`` can
   never be reused for other parameters or sources); a file lock makes parallel builds of the
   same set (pytest-xdist, two shells) wait for each other instead of colliding.
2. :func:`run_variant` writes a job file (``cosim_job.json``: configuration, parameters, seed,
   mutation) into a fresh run directory, runs the simulator there (the test bench reads the
   job from its working directory), and reads the xUnit results file and the test bench's
   per-test report (stimulus count, cycles simulated) itself: ``runner.test()`` does not raise
   outside pytest and calls ``sys.exit`` inside it.
3. A *mutation* (``--mutation`` / ``mutation=``) makes the test bench perturb the Python model by
   one cycle or one bit before the run; the co-simulation must then fail (the mutation tests).

The harness does file I/O and starts processes; the simulator core never imports it.

Modules, one concern each: :mod:`~archsim.cosim.blocks` (the registry of blocks, variants and
mutation names), :mod:`~archsim.cosim.models` (adapters to the simulator's models),
:mod:`~archsim.cosim.channel` (the PIM channel block's parameters, ports and reference),
:mod:`~archsim.cosim.replay` (command logs and COMP traces for the replay blocks),
:mod:`~archsim.cosim.params` (Verilog parameters and expected ports),
:mod:`~archsim.cosim.verilog` (pyverilog front end), :mod:`~archsim.cosim.isa_fields` (the
generated ISA include), :mod:`~archsim.cosim.build`, :mod:`~archsim.cosim.runner` (runs and
jobs), :mod:`~archsim.cosim.mutations` and :mod:`~archsim.cosim.testing` (pytest helpers).
Everything public is re-exported here, so ``from archsim import cosim; cosim.run_variant(...)``
works as before the split.
"""
from __future__ import annotations

from archsim.cosim.blocks import BLOCKS, Block, Variant, get_block, get_variant
from archsim.cosim.build import build, build_key
from archsim.cosim.channel import (MEM_SIDE, ChannelReference, channel_expected_ports,
                                   channel_verilog_parameters, max_gemv_k)
from archsim.cosim.common import (CLOCK_PERIOD_NS, DEFAULT_BUILD_ROOT, DEFAULT_SEED,
                                  GENERATED_DIR, JOB_FILE, REPO_ROOT, REPORT_FILE, RTL_DIR,
                                  TB_DIR, TB_FILE_PATTERN, CosimError, clog2)
from archsim.cosim.isa_fields import (ISA_FIELDS_VH, ISA_KIND_CODES, _field_raw_range,
                                      generate_isa_fields_vh, write_isa_fields_vh)
from archsim.cosim.models import (BANK_COMMANDS, BANK_RTL_NAMES, bank_model, isa_engines,
                                  isa_model_decode, isa_model_encode, load_cosim_config,
                                  npu_min_rows, npu_tile_latency_cycles, npu_timing_module,
                                  pim_fill_cycles, pim_fp_format, pim_fp_mac_step,
                                  pim_mac_step, pim_operand_bits, wrap_signed)
from archsim.cosim.mutations import MUTATIONS, apply_mutation
from archsim.cosim.params import (bank_expected_ports, bank_verilog_parameters, expected_ports,
                                  isa_expected_ports, isa_verilog_parameters,
                                  verilog_parameters)
from archsim.cosim.simulators import (DEFAULT_SIMULATOR, SIMULATORS, check_simulator,
                                      check_simulator_name)
from archsim.cosim.replay import (REPLAY_WORKLOADS, channel_log, comp_trace, load_channel_log,
                                  read_channel_log, read_comp_trace)
from archsim.cosim.runner import (CosimJob, CosimResult, TestOutcome, load_job, run_block,
                                  run_variant)
from archsim.cosim.testing import (assert_cosim_passes, assert_mutation_detected,
                                   bench_simulators, require_icarus_or_skip,
                                   require_simulator_or_skip)
from archsim.cosim.verilog import ModuleInterface, check_interface, parse_module_interface

__all__ = ["BLOCKS", "Block", "Variant", "CosimError", "CosimResult", "TestOutcome",
           "CosimJob", "verilog_parameters", "expected_ports", "check_interface",
           "parse_module_interface", "build", "run_variant", "run_block", "load_job",
           "get_block", "get_variant", "build_key", "clog2", "DEFAULT_BUILD_ROOT", "RTL_DIR",
           "assert_cosim_passes", "assert_mutation_detected", "MUTATIONS", "apply_mutation",
           "SIMULATORS", "DEFAULT_SIMULATOR", "check_simulator", "bench_simulators",
           "require_simulator_or_skip", "ChannelReference", "channel_verilog_parameters",
           "channel_expected_ports", "MEM_SIDE", "max_gemv_k", "REPLAY_WORKLOADS",
           "channel_log", "comp_trace", "load_channel_log", "read_channel_log",
           "read_comp_trace"]
