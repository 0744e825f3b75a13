"""The figures are drawn and written (files with the format's signature)."""

from __future__ import annotations

import pytest

from nnmeter import plots
from nnmeter.predictors.model import KernelRow, LatencyReport

PNG = b"\x89PNG"


def _report(with_intervals: bool) -> LatencyReport:
    rows = tuple(KernelRow(t, (f"n{i}",), (), ms, "regressor",
                           interval_ms=(0.9 * ms, 1.2 * ms) if with_intervals else None)
                 for i, (t, ms) in enumerate([("conv-bn-relu", 1.0), ("conv-bn-relu", 2.0),
                                              ("relu", 0.1), ("fc", 0.5)]))
    return LatencyReport(total_ms=3.6, rows=rows, uncovered=(), backend_id="ort-cpu",
                         device=None, model="m", interval_ms=(3.3, 4.0) if with_intervals
                         else None, interval_level=0.9 if with_intervals else None)


@pytest.mark.parametrize("with_intervals", [True, False])
def test_kernel_type_bars(tmp_path, with_intervals):
    path = plots.kernel_type_bars(_report(with_intervals), tmp_path / "bars.png", top=2)
    assert path.read_bytes()[:4] == PNG


def test_predicted_vs_measured_and_svg(tmp_path):
    path = plots.predicted_vs_measured([1.0, 2.2, 9.0], [1.1, 2.0, 10.0], ["a", "a", "b"],
                                       tmp_path / "sub" / "scatter.svg", title="t")
    assert path.read_text().lstrip().startswith("<?xml")


def test_sampling_curves(tmp_path):
    rounds = [{"kernel_type": "relu", "n_measured_total": n, "cv_acc10": a}
              for n, a in ((20, 0.5), (40, 0.8), (60, 0.9))] + [{"kernel_type": "fc"}]
    assert plots.sampling_curves(rounds, tmp_path / "s.png").read_bytes()[:4] == PNG
    with pytest.raises(ValueError, match="no sampling rounds"):
        plots.sampling_curves([{"kernel_type": "fc"}], tmp_path / "x.png")


def test_the_sampling_curves_script_reads_a_committed_round_log(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    plot = tmp_path / "curves.png"
    p = subprocess.run([sys.executable, str(repo / "experiments" / "sampling_curves.py"),
                        "--dataset", "ort-cpu@epyc-zen4-avx512-2c", "--plot", str(plot),
                        "--json"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    curves = json.loads(p.stdout)
    assert "conv-bn-relu" in curves and all(0 <= r["cv_acc10"] <= 1 for r in curves["conv-bn-relu"])
    assert plot.read_bytes()[:4] == PNG
    bad = subprocess.run([sys.executable, str(repo / "experiments" / "sampling_curves.py"),
                          "--dataset", "ort-cpu@nosuch"], capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode != 0 and "rounds.jsonl" in bad.stderr


def test_family_bars_draw_every_method_and_refuse_nothing(tmp_path):
    scores = {"resnet": {"nnmeter": 0.95, "FLOPs": 0.4}, "vgg": {"nnmeter": 1.0,
                                                                "FLOPs": float("nan")}}
    assert plots.family_bars(scores, tmp_path / "f.png").read_bytes()[:4] == PNG
    with pytest.raises(ValueError, match="no families"):
        plots.family_bars({}, tmp_path / "g.png")


def test_method_panels_draw_a_panel_per_method_and_check_lengths(tmp_path):
    measured = [1.0, 2.0, 4.0, 8.0]
    path = plots.method_panels(measured, {"a": [1.05, 2.1, 3.9, 8.5], "b": [2, 3, 4, 5]},
                               tmp_path / "m.png", title="t")
    assert path.read_bytes()[:4] == PNG
    with pytest.raises(ValueError, match="b: 3 predictions for 4"):
        plots.method_panels(measured, {"b": [1, 2, 3]}, tmp_path / "n.png")
    with pytest.raises(ValueError, match="no predictions"):
        plots.method_panels(measured, {}, tmp_path / "o.png")


def test_accuracy_curve_labels_each_predictor(tmp_path):
    pts = {"seed 1": [(725, 0.9, "transfer"), (32832, 0.97, "full build")]}
    assert plots.accuracy_curve(pts, tmp_path / "c.png").read_bytes()[:4] == PNG
    with pytest.raises(ValueError, match="no points"):
        plots.accuracy_curve({}, tmp_path / "d.png")
