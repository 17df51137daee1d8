"""Figures for the notebooks (seaborn), each placing the paper's values beside this run's."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless (papermill, CI); notebooks still display the returned figures
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402


def save(fig: plt.Figure, output_dir: str | Path, name: str) -> list[Path]:
    """Write ``name``.png and ``name``.pdf; returns the paths."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    for p in paths:
        fig.savefig(p, bbox_inches="tight", dpi=150)
    return paths


def cost_vs_success(points: pd.DataFrame, *, title: str, note: str = "") -> plt.Figure:
    """Figure 3: mean LLM calls per held-out task vs held-out success, one point per method.

    ``points`` columns: method, calls, success, source ("paper" or "this run").
    """
    sns.set_theme(style="whitegrid")
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    sns.scatterplot(data=points, x="calls", y="success", hue="method", style="source", s=120, ax=ax)
    for _, r in points[points["source"] == "paper"].iterrows():  # this run's points are in the legend
        ax.annotate(r["method"], (r["calls"], r["success"]), textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.set_xlabel("mean LLM calls per held-out task")
    ax.set_ylabel("held-out success (%)")
    ax.set_title(title)
    if note:
        fig.text(0.01, -0.06, note, fontsize=7, wrap=True)
    ax.legend(fontsize=7, loc="best")
    return fig


def success_bars(df: pd.DataFrame, *, x: str, hue: str, title: str, note: str = "") -> plt.Figure:
    """Grouped bars of success (%) with the paper's and this run's values side by side."""
    sns.set_theme(style="whitegrid")
    fig, ax = plt.subplots(figsize=(8, 4.2))
    sns.barplot(data=df, x=x, y="success", hue=hue, ax=ax, errorbar=None)
    ax.set_ylabel("held-out success (%)")
    ax.set_title(title)
    ax.tick_params(axis="x", labelrotation=30)
    if note:
        fig.text(0.01, -0.12, note, fontsize=7, wrap=True)
    return fig
