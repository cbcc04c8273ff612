"""Replicas behind a router: the routing policies, replicas that run side by side in simulated
time (each exactly as if it served its share alone), the router's decision per request in the
CSV, and ``archsim run --serve --replicas N --router P``."""
from __future__ import annotations

import json

import numpy as np
import pytest

from archsim.cli import main
from archsim.errors import ArchsimError
from archsim.serving import (KvPolicy, ReplicaLoad, check_router, choose_replica,
                             make_request_set, serve)
from workloads.models import get_model

MODEL = get_model("gpt3-7b")
SERVE = ["run", "--system", "gpu", "--model", "tiny-gpt", "--serve", "--num-requests", "24",
         "--dataset", "alpaca", "--quiet"]


class ShapeTimer:
    """An iteration takes 1 ms + 0.1 ms per request + 1 µs per query token (deterministic)."""

    def time(self, mix):
        return 1e-3 + 1e-4 * mix.size + 1e-6 * float(mix.q_tokens.sum()), "roofline"

    def describe(self):
        return "shape"


def _rs(inp, out, arr):
    return make_request_set(inp, out, MODEL).with_arrivals(np.array(arr, float), "given")


def test_policies_on_hand_made_loads():
    loads = [ReplicaLoad(3, 100, 500), ReplicaLoad(1, 900, 1000), ReplicaLoad(1, 0, 50)]
    assert [choose_replica("round-robin", loads, k) for k in range(4)] == [0, 1, 2, 0]
    assert choose_replica("least-loaded", loads, 0) == 1        # tie 1 vs 2: lower index
    assert choose_replica("kv-aware", loads, 0) == 0            # headroom 400 > 100 > 50
    tie = [ReplicaLoad(2, 0, 100), ReplicaLoad(1, 0, 100)]
    assert choose_replica("kv-aware", tie, 0) == 1              # tie: fewer outstanding
    with pytest.raises(ArchsimError, match="--router 'random' not one of"):
        choose_replica("random", loads, 0)
    with pytest.raises(ArchsimError, match=r"--replicas 0: must be an integer 1\.\.1024"):
        check_router("round-robin", 0)


def test_each_replica_serves_its_share_exactly_as_alone():
    rng = np.random.default_rng(3)
    n = 12
    inp, out = rng.integers(5, 60, n), rng.integers(2, 40, n)
    arr = np.sort(rng.uniform(0, 0.05, n))
    both = serve(_rs(inp, out, arr), ShapeTimer(), kv_capacity_tokens=10**6, replicas=2,
                 router="round-robin")
    assert [r.replica for r in both.requests] == [k % 2 for k in range(n)]
    for k in (0, 1):
        alone = serve(_rs(inp[k::2], out[k::2], arr[k::2]), ShapeTimer(),
                      kv_capacity_tokens=10**6)
        mine = [r for r in both.requests if r.replica == k]
        assert [r.finish_s for r in mine] == pytest.approx([r.finish_s for r in alone.requests])
        assert [r.first_token_s for r in mine] == pytest.approx(
            [r.first_token_s for r in alone.requests])
        assert both.replicas[k]["iterations"] == alone.iterations
    assert both.iterations == sum(r["iterations"] for r in both.replicas)
    assert both.router == "round-robin" and len(both.replicas) == 2


def test_least_loaded_sends_a_request_to_the_replica_with_fewer_outstanding():
    # request 0 (long) to replica 0; request 1 arrives while 0 is running: replica 1 is idle;
    # request 2 arrives after 1 finished: replica 1 is empty again, replica 0 still busy
    res = serve(_rs([10, 10, 10], [1000, 2, 2], [0.0, 0.01, 0.5]), ShapeTimer(),
                kv_capacity_tokens=10**6, replicas=2, router="least-loaded")
    assert [r.replica for r in res.requests] == [0, 1, 1]
    rr = serve(_rs([10, 10, 10], [1000, 2, 2], [0.0, 0.01, 0.5]), ShapeTimer(),
               kv_capacity_tokens=10**6, replicas=2, router="round-robin")
    assert [r.replica for r in rr.requests] == [0, 1, 0]
    assert res.requests[2].e2e_s < rr.requests[2].e2e_s          # it did not queue behind 0


def test_kv_aware_avoids_the_replica_whose_cache_is_full():
    # replica 0 holds a request whose 200 prompt tokens fill 13 of 16 blocks; the next goes
    # to replica 1, and a third to whichever has more headroom (replica 1 holds only 2 blocks)
    pol = KvPolicy("paged", 16)
    res = serve(_rs([200, 20, 20], [50, 50, 50], [0.0, 0.001, 0.002]), ShapeTimer(),
                kv_capacity_tokens=256, kv=pol, replicas=2, router="kv-aware")
    assert [r.replica for r in res.requests] == [0, 1, 1]
    assert res.preemptions == 0


def test_archsim_run_four_replicas_least_loaded(tmp_path, capsys):
    pd = pytest.importorskip("pandas")
    out, csv = tmp_path / "r.json", tmp_path / "r.csv"
    assert main(SERVE + ["--replicas", "4", "--router", "least-loaded", "--arrival", "poisson",
                         "--rate", "2000", "--json", str(out), "--csv", str(csv)]) == 0
    text = capsys.readouterr().out
    assert "4 replicas" in text and "per replica (router least-loaded" in text
    d = json.loads(out.read_text())["serving"]
    assert d["router"] == "least-loaded" and len(d["replicas"]) == 4
    assert sum(r["requests"] for r in d["replicas"]) == 24
    assert sum(r["output_tokens"] for r in d["replicas"]) == d["output_tokens"]
    df = pd.read_csv(csv)
    assert sorted(df["request"]) == list(range(24)) and set(df["replica"]) <= {0, 1, 2, 3}
    assert df.groupby("replica").size().tolist() == [r["requests"] for r in d["replicas"]]


@pytest.mark.parametrize("flags,why", [
    (["--replicas", "0"], "--replicas 0: must be an integer 1..1024"),
    (["--replicas", "2", "--router", "random"], "--router 'random' not one of"),
    (["--router", "kv-aware"], "--router kv-aware splits requests across replicas: add "
                               "--replicas N"),
])
def test_bad_replica_flags_are_one_line_errors(flags, why, capsys):
    assert main(SERVE + flags) == 2
    err = capsys.readouterr().err
    assert why in err and err.count("\n") == 1


def test_replica_flags_need_serve(capsys):
    assert main(["run", "--system", "gpu", "--model", "tiny-gpt", "--batch", "4", "--quiet",
                 "--replicas", "2"]) == 2
    assert "--replicas applies only to a serving run" in capsys.readouterr().err
