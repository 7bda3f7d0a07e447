"""The recipe's results drawn: each model's %WER on seen and unseen voices against its training wall time, from the
results table `digits_recipe.py` writes (FOLDER/results-TASK.md), with matplotlib (the plot extra, in `make`'s .venv).

    python benchmarks/results_plot.py FOLDER/results-digits.md [--title TEXT]   # writes FOLDER/results-digits.png
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NamedTuple


class Point(NamedTuple):
    """One model on one test set, as the table gives it."""

    system: str
    test_set: str
    wer: float
    training_seconds: float


def read_table(text: str) -> list[Point]:
    """The points of a results table (columns: system, test set, voices, utterances, %WER, %SER, real-time factor,
    training seconds as "N s")."""
    points = []
    for line in text.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 8:
            points.append(Point(cells[0], cells[1], float(cells[4]), float(cells[7].removesuffix(" s"))))
    return points


def plot(points: list[Point], path: Path, title: str) -> None:
    """A PNG at `path`: x the training seconds, y the %WER; a colour per system, a filled dot for the unseen voice
    and a ring for the seen ones."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    systems = list(dict.fromkeys(p.system for p in points))
    for k, system in enumerate(systems):
        colour = f"C{k}"
        for p in (p for p in points if p.system == system):
            unseen = p.test_set == "unseen"
            ax.scatter(
                p.training_seconds, p.wer, s=60, color=colour if unseen else "white", edgecolors=colour,
                linewidths=2, label=system if unseen else None, zorder=3,
            )  # fmt: skip
    ax.scatter([], [], s=60, color="white", edgecolors="gray", linewidths=2, label="(ring: seen voices)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("training wall time (s)")
    ax.set_ylabel("%WER (filled: unseen voice)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("table", type=Path)
    p.add_argument("--title", help="the plot's title (default: the table's file name)")
    args = p.parse_args()
    out = args.table.with_suffix(".png")
    plot(read_table(args.table.read_text()), out, args.title or args.table.stem)
    print(out)


if __name__ == "__main__":
    main()
