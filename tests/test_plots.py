"""The notebooks' figures (analysis/plots.py): the panels, labels and files a reader would see."""

from __future__ import annotations

import pandas as pd

from antipersist_lib.analysis import plots


def _sweeps() -> pd.DataFrame:
    rows = []
    for prm, values, benches in (("B", [1, 5, 10], ["alfworld", "webshop"]), ("B_hat", [3, 10], ["alfworld"])):
        for bench in benches:
            for v in values:
                rows.append({"parameter": prm, "benchmark": bench, "value": v, "success": 10.0 * v, "source": "paper"})
    return pd.DataFrame(rows)


def test_sweep_per_parameter_draws_one_figure_per_parameter():
    labels = {"B_hat": "B̂ (neighbourhood size)", "B": "B (records retrieved)"}
    figs = plots.sweep_per_parameter(_sweeps(), labels, title="Figure 12: sensitivity to {param}")
    assert list(figs) == ["B_hat", "B"]  # the labels' order
    assert len(figs["B"].axes) == 2 and len(figs["B_hat"].axes) == 1  # one panel per benchmark of that parameter
    assert figs["B"].get_suptitle() == "Figure 12: sensitivity to B"
    assert [ax.get_xlabel() for ax in figs["B"].axes] == ["B (records retrieved)"] * 2
    assert [ax.get_title() for ax in figs["B"].axes] == ["alfworld", "webshop"]
    (line,) = figs["B_hat"].axes[0].get_lines()[:1]
    assert list(line.get_xdata()) == [3, 10] and list(line.get_ydata()) == [30.0, 100.0]  # only B_hat's rows


def test_save_writes_png_and_pdf(tmp_path):
    figs = plots.sweep_per_parameter(_sweeps(), {"B": "B"}, title="t")
    paths = plots.save(figs["B"], tmp_path / "out", "figure12_B")
    assert [p.name for p in paths] == ["figure12_B.png", "figure12_B.pdf"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths[1].read_bytes()[:5] == b"%PDF-"
