"""Lane charts of simulated iterations: compute and the links through one steady iteration."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from gradsync.algorithms.simulator import COMPUTE, LINK_1, LINK_2

if TYPE_CHECKING:
    from gradsync.algorithms.simulator import Prediction

_COLORS = {"F": "#4c72b0", "B": "#dd8452", "link 1": "#55a868", "link 2": "#8172b3"}


def draw_timelines(predictions: Mapping[str, Prediction], path: Path) -> None:
    """One lane chart per schedule: compute, link 1 and link 2 through one steady iteration;
    sends of an earlier iteration's gradient are hatched."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    lanes = {COMPUTE: 2, LINK_1: 1, LINK_2: 0}
    figure = Figure(figsize=(11, 1.6 * len(predictions) + 1.0), layout="constrained")
    axes = figure.subplots(len(predictions), 1, sharex=True, squeeze=False)[:, 0]
    span = max((p.timeline_span for p in predictions.values()), default=0.0)
    for ax, (name, prediction) in zip(axes, predictions.items(), strict=True):
        for event in prediction.timeline:
            color = _COLORS[event.label[0]] if event.stream == COMPUTE else _COLORS[event.stream]
            width = (event.end - event.start) * 1e3
            ax.broken_barh(
                [(event.start * 1e3, width)],
                (lanes[event.stream] - 0.4, 0.8),
                facecolors=color,
                edgecolor="white",
                linewidth=0.5,
                hatch="//" if " t-" in event.label else None,
            )
            if width > 0.04 * span * 1e3:  # room for the label
                ax.text(
                    (event.start + event.end) / 2 * 1e3,
                    lanes[event.stream],
                    event.label,
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white",
                    clip_on=True,
                )
        ax.set_yticks([0, 1, 2], [LINK_2, LINK_1, COMPUTE])
        ax.set_ylim(-0.6, 2.6)
        ax.set_title(
            f"{name}: iteration {prediction.iteration * 1e3:.2f} ms, bubble "
            f"{prediction.bubble_ratio:.0%}, {prediction.update_frequency:.2f} updates/iteration",
            loc="left",
            fontsize=9,
        )
    axes[-1].set_xlim(0, span * 1e3 if span > 0 else 1)
    axes[-1].set_xlabel("ms from the start of one steady-state iteration")
    figure.legend(
        handles=[
            Patch(color=_COLORS["F"], label="forward"),
            Patch(color=_COLORS["B"], label="backward"),
            Patch(color=_COLORS["link 1"], label="send on link 1"),
            Patch(color=_COLORS["link 2"], label="send on link 2"),
            Patch(facecolor="white", edgecolor="black", hatch="//", label="earlier gradient"),
        ],
        loc="outside lower center",
        ncols=5,
        fontsize=8,
    )
    figure.savefig(path, dpi=120)
