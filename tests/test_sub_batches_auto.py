"""``system.sub_batches: auto``: the runtime picks the count of sub-batches per iteration
(issue 19 item 1) — never slower than a fixed count in 1..max_sub_batches, reported, refused
where a count is needed."""
from __future__ import annotations

import pytest

from archsim.cli import main
from archsim.config import load_config
from archsim.errors import ConfigError
from archsim.system import simulate_iteration
from workloads import default_batch, get_model


@pytest.mark.parametrize("batch,best", [(8, 1), (64, 2)])
def test_auto_equals_the_better_fixed_count_and_says_which(batch, best):
    """tiny-gpt on neupims: one sub-batch wins at 8 requests, two at 64 (measured)."""
    m = get_model("tiny-gpt")
    b = default_batch(m, batch, "sharegpt", seed=0, n_channels=32)
    fixed = {n: simulate_iteration(load_config("neupims", [f"system.sub_batches={n}"]), m, b,
                                   with_events=False).cycles_per_iteration for n in (1, 2)}
    auto = simulate_iteration(load_config("neupims", ["system.sub_batches=auto"]), m, b,
                              with_events=False)
    assert auto.cycles_per_iteration == min(fixed.values())
    info = auto.extra["sub_batches_auto"]
    assert info["chosen"] == best and info["cycles_by_count"] == fixed
    assert any("sub_batches auto: chose" in n for n in auto.notes)


def test_max_sub_batches_bounds_the_candidates():
    m = get_model("tiny-gpt")
    b = default_batch(m, 64, "sharegpt", seed=0, n_channels=32)
    cfg = load_config("neupims", ["system.sub_batches=auto", "system.max_sub_batches=1"])
    r = simulate_iteration(cfg, m, b, with_events=False)
    assert r.extra["sub_batches_auto"]["cycles_by_count"].keys() == {1}


def test_max_sub_batches_without_auto_is_refused():
    with pytest.raises(ConfigError, match="max_sub_batches 3 applies only with sub_batches: "
                                          "auto"):
        load_config("neupims", ["system.max_sub_batches=3"])
    with pytest.raises(ConfigError, match="'many' is not an integer 1..64 or auto"):
        load_config("neupims", ["system.sub_batches=many"])


def test_compile_needs_a_count(tmp_path, capsys):
    rc = main(["compile", "--model", "tiny-gpt", "--batch", "8", "--set",
               "system.sub_batches=auto", "-o", str(tmp_path / "d")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--set system.sub_batches=N" in err
