"""CLI: archsim asm / disasm / isa doc, and one-line errors with exit code 2."""
from __future__ import annotations

from archsim.cli import main
from isa.doc import generate_markdown
from isa.program import Program

SRC = """\
.data
    W addr=0x0 size=4096 shape=32x64 dtype=fp16 kind=weight
.stream dma0
    DMA_LOAD spad=0x0, hbm=W+0x80, rows=2, cols=64, stride=128, dtype=fp16
    SIGNAL sem=1, count=1
.stream sa
    WAIT sem=1, count=1
    SA_LOADW array=any, w=0x0, k=2, n=64, dtype=fp16
"""


def test_asm_then_disasm_round_trips(tmp_path, capsys):
    src = tmp_path / "p.s"
    src.write_text(SRC)
    assert main(["asm", str(src), "-o", str(tmp_path / "p.bin")]) == 0
    assert "4 instructions in 2 streams" in capsys.readouterr().out
    assert main(["disasm", str(tmp_path / "p.bin")]) == 0
    text = capsys.readouterr().out
    assert "hbm=W+0x80" in text and "array=any" in text
    (tmp_path / "q.s").write_text(text)
    assert main(["asm", str(tmp_path / "q.s")]) == 0
    assert (tmp_path / "q.bin").read_bytes() == (tmp_path / "p.bin").read_bytes()
    assert Program.from_bytes((tmp_path / "q.bin").read_bytes()).n_instructions == 4


def test_asm_error_is_one_line_with_line_and_column(tmp_path, capsys):
    bad = tmp_path / "bad.s"
    bad.write_text(".stream dma0\n  WAIT sem=70000, count=1\n")
    assert main(["asm", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert f"{bad}:2:12:" in err and "field sem (16-bit unsigned, 0..65535)" in err


def test_disasm_of_a_non_program_is_one_line(tmp_path, capsys):
    f = tmp_path / "x.bin"
    f.write_bytes(b"hello world, not a program")
    assert main(["disasm", str(f)]) == 2
    assert "bad magic" in capsys.readouterr().err


def test_isa_doc_writes_the_reference(tmp_path, capsys):
    out = tmp_path / "isa.md"
    assert main(["isa", "doc", "-o", str(out)]) == 0
    assert out.read_text() == generate_markdown()
