"""Charts as inline PNGs (matplotlib, Agg): metric curves per run and the MoE expert-load heatmap."""
from __future__ import annotations

import base64
import io
from typing import TYPE_CHECKING

from lab.report.format import fmt
from lab.report.stats import EXPERT, is_moe

if TYPE_CHECKING:
    from lab.report.runs import Run


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=72)  # fixed margins: bbox_inches="tight" would draw every figure twice
    return base64.b64encode(buf.getvalue()).decode()


def _pyplot():
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def run_labels(runs: list[Run], keys: list[str]) -> list[str]:
    """Legend labels: the run's name and its distinguishing settings (last key component)."""
    return [" ".join([r.name, *(f"{k.rsplit('.', 1)[-1]}={fmt(r.config.get(k))}" for k in keys)]) for r in runs]


def curve_charts(runs: list[Run], columns: list[str], labels: list[str]) -> list[tuple[str, str]]:
    """(title, base64 PNG): every metric logged at more than one step, all runs overlaid (run i in colour i).
    Per-expert MoE shares (one column per expert) are drawn in their own section instead."""
    plt = _pyplot()
    charts = []
    colors = plt.get_cmap("tab20" if len(runs) > 10 else "tab10")
    for c in columns:
        if (is_moe(c) and EXPERT.search(c)) or not any(len(r.series(c)[1]) > 1 for r in runs):
            continue
        fig = plt.figure(figsize=(7.2, 3.4))
        ax = fig.add_axes((0.09, 0.14, 0.56, 0.76))  # legend outside, right of the axes
        for i, r in enumerate(runs):
            x, y = r.series(c)
            if y:
                ax.plot(x, y, label=labels[i], color=colors(i % colors.N), linewidth=1.2, marker="." if len(y) < 30 else None)
        ax.set_title(c, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        charts.append((c, _png(fig)))
        plt.close(fig)
    return charts


def moe_charts(runs: list[Run], columns: list[str]) -> list[tuple[str, str]]:
    """Expert load: the final share of tokens routed to each expert (`.../moe/<layer>/expert_<i>`, validation
    when logged, else training) as one heatmap, a row per run and layer and a column per expert, so
    unbalanced routing shows as uneven colour along a row."""
    experts = [c for c in columns if is_moe(c) and EXPERT.search(c)]
    stage = "val/" if any(c.startswith("val/") for c in experts) else ""
    experts = [c for c in experts if c.startswith(stage)]
    rows, labels = [], []
    layers = sorted({EXPERT.sub("", c) for c in experts})  # ".../moe/<layer>/"
    n_experts = 1 + max((int(EXPERT.search(c).group(1)) for c in experts), default=-1)
    for r in runs:
        for layer in layers:
            shares = [r.final(f"{layer}expert_{i}") for i in range(n_experts)]
            if any(v is not None for v in shares):
                rows.append([float("nan") if v is None else v for v in shares])
                labels.append(f"{r.name} {layer.split('/moe/')[-1].strip('/')}")
    if not rows:
        return []
    plt = _pyplot()
    fig = plt.figure(figsize=(min(12.0, 3.0 + 0.4 * n_experts), 1.2 + 0.22 * len(rows)))
    ax = fig.add_axes((0.3, 0.12, 0.55, 0.78))
    image = ax.imshow(rows, aspect="auto", cmap="viridis")
    ax.set_xticks(range(n_experts), [str(i) for i in range(n_experts)], fontsize=7)
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.set_xlabel("expert", fontsize=8)
    ax.set_title(f"share of tokens per expert (final, {stage.rstrip('/') or 'train'})", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.04)
    chart = ("moe expert load", _png(fig))
    plt.close(fig)
    return [chart]
