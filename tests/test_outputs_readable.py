"""Outputs a new user can read: the stages are explained where they appear, the timeline plot
says what span it shows and keeps its legend off the curves."""
from __future__ import annotations

import pytest

import archsim.plots as plots
from archsim.cli import main
from archsim.config import load_config
from archsim.results import STAGES, stage_description, stage_label
from archsim.serving import make_batch, simulate_system_iteration
from workloads.models import get_model


@pytest.fixture(scope="module")
def results():
    model = get_model("tiny-gpt")
    out = {}
    for system, preset in (("neupims", "neupims"), ("npu", "npu-only"),
                           ("gpu", "gpu-a100")):
        cfg = load_config(preset)
        out[system] = simulate_system_iteration(cfg, model, make_batch(model, 4, cfg=cfg),
                                                system=system)
    return out


def test_every_stage_the_simulators_report_is_explained(results):
    for system, r in results.items():
        assert r.stage_seconds, system
        for stage in r.stage_seconds:
            assert stage_description(stage), f"{system}: stage {stage!r} has no description"
    assert set("ABCDEF") <= set(results["neupims"].stage_seconds)
    assert stage_label("C").startswith("C: ") and "MHA#2" in stage_label("C")
    assert all(len(v) == 2 and v[1] for v in STAGES.values())


def test_the_run_table_says_what_runs_in_each_stage(capsys):
    assert main(["run", "--model", "tiny-gpt", "--batch", "4", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "what runs" in out and "NeuPIMs sub-batch interleaving" in out
    line = next(x for x in out.splitlines() if x.startswith("│ B "))
    assert "QKV generation of sub-batch 2" in line and "attention of sub-batch 1" in line


def _capture(monkeypatch):
    """Keep the figures the plot functions would save (drawn, so extents are known)."""
    figs = []

    def keep(fig, path):
        fig.canvas.draw()
        figs.append(fig)
        return path
    monkeypatch.setattr(plots, "_save", keep)
    return figs


def test_timeline_plot_title_gives_the_span_and_the_legend_is_outside(results, monkeypatch,
                                                                     tmp_path):
    figs = _capture(monkeypatch)
    r = results["neupims"]
    plots.plot_timeline_utilisation(r.events, r.events_clock_mhz, tmp_path / "t.png",
                                    title="neupims: busy fraction")
    ax = figs[0].axes[0]
    span_us = (max(e.end_cycle for e in r.events) - min(e.start_cycle for e in r.events)) \
        / r.events_clock_mhz
    assert f"({span_us:,.2f} µs)" in ax.get_title()
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1          # right of the axes, not on curves


def test_stage_plot_has_a_caption_of_every_stage(results, monkeypatch, tmp_path):
    figs = _capture(monkeypatch)
    plots.plot_stage_breakdown(results, tmp_path / "s.png")
    texts = "\n".join(t.get_text() for t in figs[0].axes[0].texts)
    for r in results.values():
        for stage in r.stage_seconds:
            assert f"{stage}: {stage_description(stage)}" in texts
    labels = [t.get_text() for t in figs[0].axes[0].get_legend().get_texts()]
    assert "A: QKV#1 | –" in labels
