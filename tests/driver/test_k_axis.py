"""The plots of k (a generator run's curves.png, the system study's generators.png and bon.png) share one axis
helper, `driver.report.log_k_axis`: a log x axis with ticks at the measured k, labelled 1, 2, 4, ... (a log
axis's own labels would read 2 x 10^0). Drawn with the Agg backend."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from driver.report import log_k_axis  # noqa: E402

KS = ["1", "2", "4", "8", "16"]  # a curve's keys, as in the JSON files


def _x_labels(ax) -> tuple[list[str], list[str]]:
    """(major, minor) x tick labels of `ax` as drawn."""
    ax.figure.canvas.draw()
    return ([t.get_text() for t in ax.get_xticklabels()],
            [t.get_text() for t in ax.get_xticklabels(minor=True) if t.get_text()])


@pytest.mark.parametrize("ks", [KS, [2, 3, 5], [1, 2, 4, 8, 16, 32, 64]])
def test_the_ticks_are_the_measured_k_as_plain_numbers(ks):
    fig, ax = plt.subplots()
    ax.plot([int(k) for k in ks], [0.5] * len(ks))
    log_k_axis(ax, ks)
    assert ax.get_xscale() == "log"
    assert _x_labels(ax) == ([str(int(k)) for k in ks], [])
    plt.close(fig)


def test_without_the_helper_a_log_axis_labels_its_ticks_in_powers_of_ten():
    """What the helper is for: on a plain log axis within one decade, the labels read 2 x 10^0."""
    fig, ax = plt.subplots()
    ax.plot([2, 3, 5], [0.5] * 3)
    ax.set_xscale("log")
    major, minor = _x_labels(ax)
    assert any("times" in label for label in major + minor)
    plt.close(fig)


def test_no_measured_k_leaves_a_plain_log_axis():
    fig, ax = plt.subplots()
    log_k_axis(ax, {})
    assert ax.get_xscale() == "log"
    plt.close(fig)


@pytest.fixture
def drawn_log_axes(monkeypatch):
    """The x labels of every log-scale axis of each figure a plot function closes."""
    drawn, close = [], plt.close

    def closing(fig=None):
        if fig is not None and hasattr(fig, "axes"):
            drawn.extend(_x_labels(ax) for ax in fig.axes if ax.get_xscale() == "log")
        return close(fig)

    monkeypatch.setattr(plt, "close", closing)
    return drawn


def test_the_three_plots_of_k_label_their_ticks_with_the_measured_k(tmp_path, drawn_log_axes):
    from benchmarks.system_report import plot_bon, plot_generators
    from driver.generator_run import plot_generator_curves

    plain = (KS, [])
    curve = {k: {"mean": 0.5, "lo": 0.4, "hi": 0.6} for k in KS}
    plot_bon({"base": {"curves": {"selector": curve, "majority": curve, "pass": curve}}}, tmp_path / "bon.png")
    assert drawn_log_axes == [plain]

    values = {k: 0.5 for k in KS}
    plot_generators({"grpo": {f"{when}_{key}": values for when in ("start", "final")
                              for key in ("pass_curve", "majority_curve")}}, tmp_path / "generators.png")
    assert drawn_log_axes == [plain] * 3

    class Log:
        def records(self, kind):
            if kind == "train":
                return [{"step": 1, "reward/all_groups_mean": 0.3}]
            return [{"step": 0, "pass_curve": values}, {"step": 2, "pass_curve": values}]

    plot_generator_curves(Log(), tmp_path / "curves.png")
    assert drawn_log_axes == [plain] * 4
    assert all(Path(tmp_path / name).stat().st_size > 0 for name in ("bon.png", "generators.png", "curves.png"))
