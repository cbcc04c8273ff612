"""Error types of the ``isa`` package (turned into one-line messages by the CLI)."""


class IsaError(Exception):
    """Base of every error raised by the ``isa`` package."""


class IllegalInstruction(IsaError):
    """A 128-bit word is not a legal instruction.

    The message names the word (hex) and why: unknown opcode, nonzero reserved bits, or a bad
    field value (an enum code past its list, a size below its minimum).
    """


class OperandError(IsaError):
    """An instruction was built with a missing, unknown or out-of-range operand.

    The message names the instruction, the field, its bit width and kind, and its legal range.
    """


class AsmError(IsaError):
    """Assembly text could not be assembled; the message starts ``FILE:LINE:COLUMN:``.

    Attributes:
        filename: the source name given to the assembler.
        line: 1-based line number.
        column: 1-based column of the offending token.
    """

    def __init__(self, filename: str, line: int, column: int, message: str) -> None:
        super().__init__(f"{filename}:{line}:{column}: {message}")
        self.filename = filename
        self.line = line
        self.column = column
        self.reason = message


class ProgramFormatError(IsaError):
    """A binary program container is malformed (bad magic, version, truncation, bad table)."""
