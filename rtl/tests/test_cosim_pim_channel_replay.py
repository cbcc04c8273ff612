"""Real command logs of the simulator replayed through pim_channel.v: every command legal in
the RTL at the cycle it was issued, every command a timing rule held back refused one cycle
earlier (the ``early`` mutation must then fail once per moved command), and a log of another
configuration refused with a one-line error naming what differs.

The default suite replays tiny-gpt logs (no shared data needed). The GPT3-7B replays of the
NeuPIMs clb-0 batch (> 100 k commands of one channel, a few minutes each) run when
``ARCHSIM_COSIM_LONG=1`` and ``../shared/data`` is present (``ARCHSIM_COSIM_LONG=1 make test``
or ``archsim cosim pim_channel_replay --variant gpt3_neupims``)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from archsim import cosim
from archsim.cli import main

BLOCK = "pim_channel_replay"
DEFAULT = [v.name for v in cosim.BLOCKS[BLOCK].variants if v.default]
LONG = [v.name for v in cosim.BLOCKS[BLOCK].variants if not v.default]

pytestmark = pytest.mark.cosim


@pytest.mark.parametrize("variant", DEFAULT)
def test_every_logged_command_of_a_tiny_model_is_legal_in_the_rtl(variant):
    r = cosim.assert_cosim_passes(BLOCK, variant)
    ex = r.tests[0].extra
    assert r.stimuli > 1000 and ex["disagreements"] == 0
    assert ex["probed_refused"] > 500, ex    # commands checked one cycle before their earliest


@pytest.mark.parametrize("variant", ["tiny_dual", "tiny_blocked"])
def test_each_command_moved_one_cycle_earlier_than_legal_is_refused(variant):
    r = cosim.assert_mutation_detected(BLOCK, variant, "early", stimulus_scale=1.0)
    ex = r.tests[0].extra
    assert ex["moved"] > 100 and ex["disagreements"] == ex["moved"], ex


@pytest.mark.parametrize("mutation", ["cycle", "gemv"])
def test_a_reference_one_cycle_off_disagrees_with_the_replay(mutation):
    cosim.assert_mutation_detected(BLOCK, "tiny_dual", mutation, stimulus_scale=1.0)


@pytest.mark.slow
@pytest.mark.data
@pytest.mark.parametrize("variant", LONG)
def test_gpt3_layer_log_of_over_100k_commands_replays_without_a_disagreement(variant):
    if os.environ.get("ARCHSIM_COSIM_LONG") != "1":
        pytest.skip("long replay (minutes): set ARCHSIM_COSIM_LONG=1 to run it")
    from archsim.cosim import replay

    try:
        replay.snapshot_path(replay.get_workload("gpt3-clb0"))
    except cosim.CosimError as exc:
        pytest.skip(str(exc))
    simulator = os.environ.get("ARCHSIM_COSIM_LONG_SIMULATOR", "verilator")
    r = cosim.assert_cosim_passes(BLOCK, variant, simulator=simulator)
    assert r.stimuli >= 100_000 and r.tests[0].extra["disagreements"] == 0


# ---------------------------------------------------------------------------- bad logs
def _rows(n=3, channel=0):
    from archsim.memory.spec import CMD_INDEX as C

    return np.array([(11, channel, 0, 0, 0, C["ACT"], 5, -1),
                     (25, channel, 0, 0, 0, C["RD"], 5, 0),
                     (50, channel, 0, 0, 0, C["PRE"], 5, -1)][:n], dtype=np.int64)


def _csv(path, rows):
    from archsim.memory.cmdlog import write_log_csv
    from archsim.memory.spec import COMMANDS

    write_log_csv([(*r[:5], COMMANDS[r[5]], *r[6:]) for r in rows.tolist()], path)
    return path


def test_a_stored_log_of_another_channel_count_is_refused_naming_both_values(tmp_path):
    cfg16 = cosim.load_cosim_config("neupims", ["memory.org.channels=16"])
    from archsim.cosim import replay

    header = {"format": replay.LOG_FORMAT, "fields": replay.legality_fields(cfg16)}
    path = replay.write_channel_log(_rows(), header, tmp_path / "log.npz")
    rows, _ = cosim.load_channel_log(path, cfg16)          # its own configuration: fine
    assert len(rows) == 3
    with pytest.raises(cosim.CosimError, match=r"recorded with memory\.org\.channels=16, this "
                       r"configuration has memory\.org\.channels=32"):
        cosim.load_channel_log(path, cosim.load_cosim_config("neupims"))


@pytest.mark.parametrize("edit, message", [
    (lambda r: r.__setitem__((1, 1), 40), "channel 40 is outside memory.org.channels=32"),
    (lambda r: r[:, 1].__setitem__(slice(None), 40), "channel 40 is outside memory.org.channels"),
    (lambda r: r.__setitem__((1, 4), 5), "bank 5 is outside memory.org.banks_per_group=4"),
    (lambda r: r.__setitem__((0, 2), 2), "rank 2 is outside memory.org.ranks=2"),
    (lambda r: r.__setitem__((0, 6), 40000), "row 40000 is outside memory.org.rows=32768"),
    (lambda r: r.__setitem__((1, 0), 11), "strictly increasing"),
])
def test_a_csv_log_that_does_not_fit_the_configuration_is_refused(tmp_path, edit, message):
    rows = _rows()
    edit(rows)
    with pytest.raises(cosim.CosimError, match=message):
        cosim.load_channel_log(_csv(tmp_path / "log.csv", rows),
                               cosim.load_cosim_config("neupims"))


def test_cli_a_log_of_another_configuration_is_a_one_line_error_before_any_build(
        capsys, tmp_path):
    rows = _rows()
    rows[1, 4] = 7                                        # bank 7: 8 banks per group
    log = _csv(tmp_path / "log.csv", rows)
    builds = tmp_path / "builds"
    assert main(["cosim", BLOCK, "--log", str(log), "--build-dir", str(builds)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert "bank 7 is outside memory.org.banks_per_group=4" in err
    assert not any(builds.iterdir()), "something was built before the log was checked"


def test_cli_log_on_another_block_is_a_one_line_error(capsys, tmp_path):
    log = _csv(tmp_path / "log.csv", _rows())
    assert main(["cosim", "pim_channel", "--log", str(log)]) == 2
    assert "--log and --channel apply to block pim_channel_replay only" in \
        capsys.readouterr().err


def test_cli_an_illegal_schedule_in_a_users_log_fails_the_replay(capsys, tmp_path):
    cosim.require_icarus_or_skip()
    rows = _rows()
    rows[2, 0] = 40                                       # PRE 29 cycles after ACT < tRAS
    log = _csv(tmp_path / "log.csv", rows)
    assert main(["cosim", BLOCK, "--log", str(log), "--build-dir", str(tmp_path / "b")]) == 1
    out = capsys.readouterr().out
    assert "cycle 40: logged PRE" in out and "earliest legal cycle 45" in out


def test_cli_replays_a_users_csv_log(capsys, tmp_path):
    cosim.require_icarus_or_skip()
    log = _csv(tmp_path / "log.csv", _rows())
    assert main(["cosim", BLOCK, "--log", str(log), "--build-dir", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "pim_channel_replay tiny_dual" in out and "PASS" in out and "logged commands" in out


def test_cli_a_channel_outside_the_configuration_is_a_one_line_error(capsys, tmp_path):
    builds = tmp_path / "b"
    assert main(["cosim", BLOCK, "--channel", "40", "--build-dir", str(builds)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--channel 40 is outside memory.org.channels=32" in err
    assert not builds.exists() or not any(builds.iterdir())
