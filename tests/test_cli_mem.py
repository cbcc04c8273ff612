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
    assert main(["mem", "run", "--trace", str(empty)]) == 0
    assert "requests=0" in capsys.readouterr().out


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
