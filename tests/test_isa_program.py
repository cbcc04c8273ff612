"""Programs: stream naming, data section, binary container round trip and its errors."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isa.encoding import Instruction
from isa.errors import IllegalInstruction, IsaError, ProgramFormatError
from isa.program import MAGIC, DataAlloc, Program, stream_kind
from isa.spec import Engine
from isa.strategies import instruction_of
from isa.spec import SPEC


def _prog() -> Program:
    p = Program(spad_size_bytes=1 << 20)
    p.add_data(DataAlloc("W", 0x0, 4096, (32, 64), "fp16", "weight"))
    p.add_data(DataAlloc("kv0", 0x10000, 4096, (16, 64), "fp32", "kv"))
    p.emit("dma0", Instruction("DMA_LOAD", spad=0, hbm=0x40, rows=2, cols=64, stride=128,
                               dtype="fp16"))
    p.emit("dma0", Instruction("SIGNAL", sem=3, count=1))
    p.emit("sa", Instruction("WAIT", sem=3, count=1))
    p.emit("pim5", Instruction("G_ACT", channel=5, row=17, bg_mask=0))
    p.labels["sa"] = {"top": 0, "end": 1}
    return p


def test_binary_container_round_trip():
    p = _prog()
    blob = p.to_bytes()
    assert blob[:8] == MAGIC and len(blob) % 16 == 0
    q = Program.from_bytes(blob)
    assert q.streams == p.streams and q.data == p.data and q.labels == p.labels
    assert q.spad_size_bytes == p.spad_size_bytes and q.to_bytes() == blob


kinds = {Engine.DMA: "dma1", Engine.SA: "sa", Engine.VU: "vu2", Engine.PIM: "pim3",
         Engine.SYNC: "vu0", Engine.LINK: "link"}


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(SPEC).flatmap(instruction_of), max_size=20))
def test_random_programs_survive_binary_and_text_round_trips(instrs):
    p = Program()
    for ins in instrs:
        p.emit(kinds[ins.spec.engine], ins)
    q = Program.from_bytes(p.to_bytes())
    assert q.streams == p.streams
    assert Program.from_text(p.to_text()).streams == p.streams


@pytest.mark.parametrize("name,kind,index", [("dma", Engine.DMA, None), ("pim31", Engine.PIM, 31),
                                              ("vu0", Engine.VU, 0), ("sa", Engine.SA, None),
                                              ("link", Engine.LINK, None)])
def test_stream_names(name, kind, index):
    assert stream_kind(name) == (kind, index)


@pytest.mark.parametrize("name", ["gpu0", "dma01", "pim-1", "", "SA"])
def test_bad_stream_names_are_rejected(name):
    with pytest.raises(IsaError, match="bad stream name"):
        stream_kind(name)


def test_wrong_engine_in_stream_is_rejected():
    with pytest.raises(IsaError, match="cannot appear in stream 'dma0'"):
        Program().emit("dma0", Instruction("G_ACT", channel=0, row=0, bg_mask=0))


def test_overlapping_or_duplicate_data_is_rejected():
    p = _prog()
    with pytest.raises(IsaError, match="overlaps 'W'"):
        p.add_data(DataAlloc("X", 0x800, 16, (8,), "fp16"))
    with pytest.raises(IsaError, match="defined twice"):
        p.add_data(DataAlloc("W", 0x90000, 16, (8,), "fp16"))
    with pytest.raises(IsaError, match="no data named 'Q'"):
        p.alloc("Q")
    assert p.find_alloc(0x10010).name == "kv0" and p.find_alloc(0x20000) is None


def test_bad_magic_version_and_truncation_are_named():
    blob = _prog().to_bytes()
    with pytest.raises(ProgramFormatError, match="bad magic"):
        Program.from_bytes(b"XXXXXXXX" + blob[8:])
    with pytest.raises(ProgramFormatError, match="version 9"):
        Program.from_bytes(blob[:8] + b"\x09\x00" + blob[10:])
    with pytest.raises(ProgramFormatError, match="describe"):
        Program.from_bytes(blob[:-16])
    with pytest.raises(ProgramFormatError, match="shorter than"):
        Program.from_bytes(blob[:10])


def test_illegal_word_in_container_names_stream_and_index():
    blob = bytearray(_prog().to_bytes())
    blob[-16:] = (0x7E).to_bytes(16, "little")  # last word of the last stream (pim5)
    with pytest.raises(IllegalInstruction, match="stream pim5 instruction 0"):
        Program.from_bytes(bytes(blob))


def _debugged() -> Program:
    from isa.encoding import Instruction
    from isa.program import DebugTable

    p = Program()
    p.emit("dma0", Instruction("NOP"))
    p.emit("link", Instruction("ALL_REDUCE", bytes=4096, group=4, algo="ring"))
    p.emit("link", Instruction("SEND", bytes=4096, peer=1))
    p.debug = DebugTable(["L0.proj_allreduce", "handoff"], ["0:A"],
                         {"dma0": ([-1], [-1], [-1]), "link": ([0, 1], [0, -1], [0, -1])})
    return p


def test_debug_table_round_trips_in_a_version_2_container():
    p = _debugged()
    blob = p.to_bytes()
    assert int.from_bytes(blob[8:10], "little") == 2
    q = Program.from_bytes(blob)
    assert q.streams == p.streams and q.debug is not None
    assert q.debug.ops == p.debug.ops and q.debug.stages == p.debug.stages
    for s in p.streams:
        for a, b in zip(p.debug.streams[s], q.debug.streams[s]):
            assert a.tolist() == b.tolist()
    assert q.debug.layer_of_ops().tolist() == [0, -1, -1]
    assert q.to_bytes() == blob


def test_program_without_debug_table_is_written_and_read_as_version_1():
    p = _debugged()
    p.debug = None
    blob = p.to_bytes()
    assert int.from_bytes(blob[8:10], "little") == 1
    assert Program.from_bytes(blob).debug is None


def test_debug_table_of_the_wrong_length_is_rejected():
    from isa.errors import IsaError

    p = _debugged()
    p.debug.streams["link"] = tuple(a[:1] for a in p.debug.streams["link"])
    with pytest.raises(IsaError, match="stream link has 1 rows for 2"):
        p.validate()
