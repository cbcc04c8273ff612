"""The mapping compiler: operator graph + request batch + machine -> per-engine ISA programs.

Public entry points (see :mod:`mapping.compiler`)::

    compile_layer(model, batch, cfg, phase="decode", layer=0, options=None) -> CompiledProgram
    compile_model(model, batch, cfg, phase="decode", options=None) -> CompiledProgram
    compile_layers(model, batch, cfg, phase="decode", layers=None, options=None)

Modules: :mod:`~mapping.placement` (engine per op, a data table), :mod:`~mapping.subbatch`
(sub-batch partitioners), :mod:`~mapping.kvlayout` (KV layout arithmetic),
:mod:`~mapping.memplan` (HBM/scratchpad allocation), :mod:`~mapping.schedule` (stage schedule),
:mod:`~mapping.builder` (streams and semaphores), :mod:`~mapping.codegen` (instructions),
:mod:`~mapping.verify` (happens-before and data-race checks of a compiled program).
"""
from mapping.compiler import (CompiledProgram, CompileOptions, compile_layer, compile_layers,
                              compile_model)
from mapping.errors import (CapacityError, MappingError, PlacementError, ScheduleError,
                            UnsupportedError)

__all__ = ["compile_layer", "compile_model", "compile_layers", "CompiledProgram",
           "CompileOptions", "MappingError", "PlacementError", "CapacityError", "ScheduleError",
           "UnsupportedError"]
