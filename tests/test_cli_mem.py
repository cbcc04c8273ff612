"""``archsim mem run`` / ``archsim mem selftest``."""
import json

from archsim.cli import main


def test_mem_run_reports_units_and_writes_json_and_log(tmp_path, capsys):
    tr = tmp_path / "t.trc"
    tr.write_text("".join(f"{i * 64:#x} {'WRITE' if i % 3 == 0 else 'READ'} {i}\n"
                          for i in range(300)))
    js, lg = tmp_path / "o.json", tmp_path / "l.csv"
    rc = main(["mem", "run", "--config", "neupims", "--set", "memory.org.channels=2",
               "--trace", str(tr), "--json", str(js), "--log", str(lg), "--check"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "B/cycle" in out and "per channel" in out and "pJ" in out and "violations=0" in out
    data = json.loads(js.read_text())
    assert data["requests"] == 300 and data["violations"] == 0
    assert data["channels"][0]["bandwidth_bytes_per_cycle"] > 0
    assert lg.read_text().startswith("cycle,channel,rank,bankgroup,bank,command,row,column")


def test_mem_run_ramulator_format_exact_engine(tmp_path, capsys):
    tr = tmp_path / "r.trc"
    tr.write_text("0x40 R\n2 0x80 W\n")
    assert main(["mem", "run", "--trace", str(tr), "--format", "ramulator",
                 "--engine", "exact"]) == 0
    assert "requests=2" in capsys.readouterr().out


def test_mem_run_bad_inputs_are_one_line_errors(tmp_path, capsys):
    bad = tmp_path / "bad.trc"
    bad.write_text("0x0 READ 0\noops\n")
    assert main(["mem", "run", "--trace", str(bad)]) == 2
    assert "bad.trc:2" in capsys.readouterr().err
    big = tmp_path / "big.trc"
    big.write_text("0xfffffffffff READ 0\n")
    assert main(["mem", "run", "--trace", str(big)]) == 2
    assert "beyond the memory capacity" in capsys.readouterr().err
    empty = tmp_path / "empty.trc"
    empty.write_text("")
    assert main(["mem", "run", "--trace", str(empty)]) == 2
    assert "empty.trc: no request in the trace" in capsys.readouterr().err


def test_mem_selftest_prints_patterns_pim_and_zero_violations(tmp_path, capsys):
    js = tmp_path / "s.json"
    rc = main(["mem", "selftest", "--set", "memory.org.channels=2", "--per-channel", "2000",
               "--json", str(js)])
    out = capsys.readouterr().out
    assert rc == 0, out
    for p in ("seq_read", "seq_write", "random_read", "rw_mix", "strided", "PIM GEMV",
              "dual", "single"):
        assert p in out
    assert "total violations=0" in out
    data = json.loads(js.read_text())
    assert data["pim_gemv"]["violations"] == 0


def test_mem_run_prints_the_system_total_bandwidth(tmp_path, capsys):
    tr = tmp_path / "t.trc"
    tr.write_text("".join(f"{i * 64:#x} READ 0\n" for i in range(4096)))
    js = tmp_path / "o.json"
    assert main(["mem", "run", "--trace", str(tr), "--json", str(js)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("bandwidth (system total"))
    data = json.loads(js.read_text())
    sy = data["system"]
    assert sy["bytes"] == 4096 * 64 == data["bytes_total"]
    assert sy["bandwidth_bytes_per_cycle"] == sy["bytes"] / sy["span_cycles"]
    assert sy["peak_bytes_per_cycle"] == 32 * 32                  # 32 channels x 32 B/cycle
    per_channel = sum(c["bytes_read"] for c in data["channels"]) / sy["span_cycles"]
    assert abs(per_channel - sy["bandwidth_bytes_per_cycle"]) < 1e-9
    assert f"{sy['bandwidth_bytes_per_cycle']:.2f} B/cycle" in line and "of the device" in line
    assert "note:" not in out                                       # a DRAMsim3 trace


def test_mem_run_ramulator_trace_says_the_arrival_rate_limits_it(tmp_path, capsys):
    tr = tmp_path / "r.trc"
    tr.write_text("".join(f"{i * 64:#x} R\n" for i in range(2048)))
    assert main(["mem", "run", "--trace", str(tr)]) == 0
    out = capsys.readouterr().out
    notes = [x for x in out.splitlines() if x.startswith("note:")]
    assert len(notes) == 1 and "one per memory cycle" in notes[0]
    assert "6.2% of the device's peak" in notes[0]


def test_mem_selftest_of_bound_stays_below_100_percent(capsys):
    assert main(["mem", "selftest", "--set", "memory.org.channels=2", "--per-channel",
                 "1024"]) == 0
    out = capsys.readouterr().out
    rows = [x.split() for x in out.splitlines()
            if x.split() and x.split()[0] in ("seq_read", "seq_write", "random_read", "rw_mix",
                                               "strided")]
    assert len(rows) == 5
    for r in rows:
        assert float(r[5].rstrip("%")) <= 100.0, r


def test_mem_selftest_on_a_newton_machine_says_why_it_skips_the_pim_parts(tmp_path, capsys):
    """The PIM parts issue NeuPIMs commands: on npu-pim-blocked (pim.commands: newton) they are
    skipped with a reason, not an internal error."""
    out = tmp_path / "s.json"
    rc = main(["mem", "selftest", "--config", "npu-pim-blocked", "--set",
               "memory.org.channels=2", "--per-channel", "500", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "not run" in text and "pim.commands: newton" in text and "total violations=0" in text
    res = json.loads(out.read_text())
    assert res["pim_gemv"] is None and res["concurrency"] == [] and res["patterns"]
