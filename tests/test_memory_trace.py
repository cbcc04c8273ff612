"""Trace files: DRAMsim3 and Ramulator formats, errors naming file and line."""
import numpy as np
import pytest

from archsim.errors import ArchsimError, SimulationError
from archsim.memory.trace import format_trace, load_trace, parse_trace_text


def test_dramsim3_lines_parse_in_file_order():
    a, w, c = parse_trace_text("0x80 WRITE 2\n# comment\n\n0x40 READ 5\n100 READ 5\n")
    assert a.tolist() == [0x80, 0x40, 100] and w.tolist() == [True, False, False]
    assert c.tolist() == [2, 5, 5]


def test_out_of_order_dramsim3_trace_names_both_lines(tmp_path):
    p = tmp_path / "o.trc"
    p.write_text("0x40 READ 5\n# comment\n0x80 WRITE 2\n")
    with pytest.raises(ArchsimError, match=r"o\.trc:3: cycle 2 is earlier than cycle 5 of "
                                           r"line 1"):
        load_trace(p)


def test_ramulator_trace_gets_the_arrival_rate_note():
    from archsim.memory.trace import arrival_rate_note, detect_trace_format

    assert detect_trace_format("# x\n0x0 R\n") == "ramulator"
    note = arrival_rate_note("ramulator", 64, 1024.0, "t.trc")
    assert "one per memory cycle" in note and "6.2% of the device's peak" in note
    assert arrival_rate_note("dramsim3", 64, 1024.0) is None


def test_ramulator_lines_with_and_without_bubbles():
    a, w, c = parse_trace_text("0x40 R\n3 0x80 W\nLD 0x100\nST 0x140\n", fmt="ramulator")
    assert a.tolist() == [0x40, 0x80, 0x100, 0x140]
    assert c.tolist() == [0, 4, 5, 6] and w.tolist() == [False, True, False, True]


def test_round_trip_through_both_formats():
    a = np.array([0, 64, 4096]); w = np.array([False, True, False]); c = np.array([0, 3, 9])
    for fmt in ("dramsim3", "ramulator"):
        a2, w2, c2 = parse_trace_text(format_trace(a, w, c, fmt), fmt)
        assert a2.tolist() == a.tolist() and w2.tolist() == w.tolist()
        assert c2.tolist() == c.tolist()


@pytest.mark.parametrize("text,fmt,line", [
    ("0x0 READ 0\n0x40 FETCH 3\n", "dramsim3", 2),
    ("0x0 READ 0\n0x40 READ\n", "dramsim3", 2),
    ("0x0 READ 0\nzz READ 1\n", "dramsim3", 2),
    ("0x0 R\n0x40 X\n", "ramulator", 2),
    ("hello\n", None, 1),
])
def test_malformed_line_names_file_and_line(tmp_path, text, fmt, line):
    p = tmp_path / "t.trc"
    p.write_text(text)
    with pytest.raises(ArchsimError, match=rf"t\.trc:{line}:"):
        load_trace(p, fmt)


def test_address_beyond_capacity_is_a_clear_error(tmp_path):
    p = tmp_path / "big.trc"
    p.write_text("0x0 READ 0\n0x900000000 READ 1\n")
    with pytest.raises(SimulationError, match=r"big\.trc:2: address 0x900000000 is beyond"):
        load_trace(p, None, capacity_bytes=0x800000000)


@pytest.mark.parametrize("text", ["", "# nothing\n\n"])
def test_empty_trace_is_an_error_naming_the_file(tmp_path, text):
    p = tmp_path / "e.trc"
    p.write_text(text)
    with pytest.raises(ArchsimError, match=r"e\.trc: no request in the trace"):
        load_trace(p)


def test_binary_trace_is_one_line(tmp_path):
    p = tmp_path / "b.trc"
    p.write_bytes(bytes(range(128, 256)))
    with pytest.raises(ArchsimError, match=r"b\.trc: not a text file"):
        load_trace(p)


def test_missing_file_and_unknown_format():
    with pytest.raises(ArchsimError, match="x.trc: cannot read memory trace"):
        load_trace("/nonexistent/x.trc")
    with pytest.raises(ArchsimError, match="unknown trace format"):
        parse_trace_text("", fmt="gem5")
