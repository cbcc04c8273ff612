"""The calibrated GPU mode reproduces its calibration points (published measurements of
serving stacks on A100 and H100) within the error its preset states, and the fit that
produced the presets' values finds them again."""
from __future__ import annotations

import pytest

from archsim.config import load_config
from archsim.gpu.calibration import POINTS, PRESET_OF, fit, predict, relative_errors


@pytest.mark.parametrize("family", sorted(POINTS))
def test_preset_reproduces_its_calibration_points_within_the_stated_error(family):
    preset = PRESET_OF[family]
    cal = load_config(preset).gpu.calibrated
    errs = relative_errors(POINTS[family], cal, preset)
    worst = max(abs(e) for _, _, e in errs)
    assert worst <= cal.max_error, [(p.describe(), f"{e:+.1%}") for p, _, e in errs]
    assert f"max {100 * worst:.1f} %" in cal.fit     # the preset states the error it has


@pytest.mark.parametrize("family", sorted(POINTS))
def test_every_point_names_its_source(family):
    for p in POINTS[family]:
        assert len(p.source) > 40 and p.measured > 0 and p.stack


def test_calibrated_beats_the_roofline_on_the_measurements():
    roof = load_config("gpu-a100", ["gpu.mode=roofline"]).gpu
    from archsim.config import GpuCalibration
    as_roofline = GpuCalibration(gemm_efficiency=roof.gemm_efficiency,
                                 weight_bw_efficiency=roof.gemv_efficiency,
                                 attention_bw_efficiency=roof.gemv_efficiency,
                                 vector_bw_efficiency=roof.vector_efficiency,
                                 kernel_launch_us=roof.kernel_launch_us)
    cal = load_config("gpu-a100").gpu.calibrated
    pts = POINTS["a100"]

    def rms(c):
        e = [x for _, _, x in relative_errors(pts, c, "gpu-a100")]
        return (sum(v * v for v in e) / len(e)) ** 0.5

    assert rms(cal) < rms(as_roofline)
    assert predict(pts[0], cal, "gpu-a100") > 0


@pytest.mark.slow
def test_the_fit_finds_the_preset_values_again():
    res = fit("a100")
    cal = load_config("gpu-a100").gpu.calibrated
    assert res.max_error <= cal.max_error + 0.005
    assert res.calibrated.gemm_efficiency == pytest.approx(cal.gemm_efficiency, rel=0.02)
