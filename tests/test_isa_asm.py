"""Assembler/disassembler: round trips, syntax, and errors naming line and column."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from isa.asm import assemble, assemble_instruction, disassemble_word, format_instruction
from isa.encoding import Instruction, encode
from isa.errors import AsmError
from isa.program import DataAlloc
from isa.spec import SPEC
from isa.strategies import instruction_of

SRC = """\
; a small program
.spad 4096
.data
    A addr=0x1000 size=256 shape=8x16 dtype=fp16 kind=weight   # weights
.stream dma0
start:  DMA_LOAD spad=0, hbm=A+0x20, rows=2, cols=16, stride=32, dtype=fp16
        SIGNAL 1, 1
.stream vu0
        WAIT sem=1 count=1
        VU_SCALE dst=0x100, src=0x0, rows=2, cols=16, dtype=fp16, imm=0.5
done:
"""


@pytest.mark.parametrize("spec", SPEC, ids=lambda s: s.mnemonic)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_assemble_disassemble_assemble_is_identity_for_every_instruction(spec, data):
    ins = data.draw(instruction_of(spec))
    text = format_instruction(ins)
    again = assemble_instruction(text)
    assert again == ins
    assert format_instruction(again) == text
    assert disassemble_word(encode(ins)) == text


def test_program_text_round_trip_keeps_labels_data_and_symbols():
    prog = assemble(SRC, "small.asm")
    assert prog.spad_size_bytes == 4096
    assert prog.labels == {"dma0": {"start": 0}, "vu0": {"done": 2}}
    ld = prog.streams["dma0"][0]
    assert ld["hbm"] == 0x1020 and ld["rows"] == 2
    text = prog.to_text()
    assert "hbm=A+0x20" in text
    again = assemble(text)
    assert again.streams == prog.streams and again.data == prog.data
    assert again.labels == prog.labels and again.to_text() == text


def test_positional_operands_follow_table_order():
    ins = assemble_instruction("WAIT 7, 2")
    assert ins == Instruction("WAIT", sem=7, count=2)


def test_float_immediate_accepts_literal_and_raw_bits():
    a = assemble_instruction("VU_SCALE dst=0 src=0 rows=1 cols=1 dtype=fp32 imm=2")
    b = assemble_instruction("VU_SCALE dst=0 src=0 rows=1 cols=1 dtype=fp32 imm=0x40000000")
    assert a == b and a["imm"] == 2.0


def test_array_any_alias():
    ins = assemble_instruction("SA_LOADW array=any, w=0, k=4, n=4, dtype=fp16")
    assert "array=any" in format_instruction(ins)


def _err(src: str) -> AsmError:
    with pytest.raises(AsmError) as exc:
        assemble(src, "bad.asm")
    return exc.value


def test_out_of_range_operand_names_line_column_field_and_width():
    e = _err(".stream dma0\n\n  DMA_LOAD spad=0, hbm=16, rows=20000, cols=8, stride=16, dtype=fp16\n")
    assert (e.line, e.column) == (3, 33)
    assert "field rows (14-bit unsigned, 1..16383)" in str(e)
    assert str(e).startswith("bad.asm:3:33:")


def test_unknown_mnemonic_names_line_column_and_suggests():
    e = _err(".stream dma0\n    DMA_LAOD spad=0\n")
    assert (e.line, e.column) == (2, 5) and "did you mean DMA_LOAD" in str(e)


def test_bad_enum_names_allowed_values():
    e = _err(".stream dma0\nDMA_LOAD spad=0, hbm=1, rows=2, cols=8, stride=16, dtype=fp64\n")
    assert e.line == 2 and e.column == 58 and "fp16|bf16|fp32" in str(e)


def test_unknown_data_name_is_reported_at_its_column():
    e = _err(".stream dma0\nDMA_LOAD spad=0, hbm=W+4, rows=2, cols=8, stride=16, dtype=fp16\n")
    assert (e.line, e.column) == (2, 22) and "no data named 'W'" in str(e)


@pytest.mark.parametrize("src,line,col,text", [
    (".stream sa\nDMA_LOAD spad=0\n", 2, 1, "cannot appear in stream 'sa'"),
    ("NOP\n", 1, 1, "before any .stream"),
    (".stream dma0\nWAIT 1\n", 2, 7, "missing operand(s) count"),
    (".stream dma0\nWAIT 1, 1, 1\n", 2, 12, "takes 2 operand(s)"),
    (".stream dma0\nWAIT sem=1, count=1, sem=2\n", 2, 22, "given twice"),
    (".stream dma0\nWAIT sem=1, cnt=1\n", 2, 13, "has no operand 'cnt'"),
    (".stream dma0\nWAIT sem=x1, count=1\n", 2, 10, "cannot parse 'x1'"),
    (".stream bogus\n", 1, 9, "bad stream name 'bogus'"),
    (".strem dma0\n", 1, 1, "unknown directive"),
    (".data\n A addr=0 size=2 shape=4 dtype=fp16\n", 2, 2, "size_bytes 2 < 8"),
    (".stream dma0\nx: NOP\nx: NOP\n", 3, 1, "label 'x' is defined twice"),
])
def test_errors_name_line_and_column(src, line, col, text):
    e = _err(src)
    assert (e.line, e.column) == (line, col), str(e)
    assert text in str(e)


def test_assemble_instruction_resolves_data_names():
    data = [DataAlloc("K", 0x4000, 1024, (8, 64), "fp16", "kv")]
    ins = assemble_instruction("DMA_LOAD spad=0, hbm=K+0x80, rows=1, cols=64, stride=0, "
                               "dtype=fp16", data)
    assert ins["hbm"] == 0x4080
    assert "hbm=K+0x80" in format_instruction(ins, data)
