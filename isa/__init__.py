"""The custom ISA of the NPU + PIM machine.

One table (:mod:`isa.spec`) defines every instruction; derived from it: the 128-bit encoding
(:mod:`isa.encoding`), text assembly (:mod:`isa.asm`), programs and their binary container
(:mod:`isa.program`) and the Markdown reference (:mod:`isa.doc`). This package imports nothing
from ``archsim``, ``mapping`` or ``workloads``.
"""
from isa.asm import assemble, disassemble_program, disassemble_word, format_instruction
from isa.encoding import Instruction, decode, decode_bytes, encode, encode_bytes
from isa.errors import AsmError, IllegalInstruction, IsaError, OperandError, ProgramFormatError
from isa.program import DataAlloc, Program, stream_kind
from isa.spec import BY_MNEMONIC, BY_OPCODE, DTYPE_BYTES, DTYPES, SPEC, Engine

__all__ = [
    "assemble", "disassemble_program", "disassemble_word", "format_instruction", "Instruction",
    "decode", "decode_bytes", "encode", "encode_bytes", "AsmError", "IllegalInstruction",
    "IsaError", "OperandError", "ProgramFormatError", "DataAlloc", "Program", "stream_kind",
    "BY_MNEMONIC", "BY_OPCODE", "DTYPE_BYTES", "DTYPES", "SPEC", "Engine",
]
