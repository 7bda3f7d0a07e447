"""The recipe's results as a plot: each model's %WER on seen and unseen voices against its training wall time, as an
SVG file written by hand (no plotting library: a bare clone runs the recipe with symnet's dependencies only)."""

from __future__ import annotations

import math
from typing import Any, NamedTuple
from xml.sax.saxutils import escape

WIDTH, HEIGHT = 640, 400
LEFT, RIGHT, TOP, BOTTOM = 64, 200, 40, 48  # margins: the legend goes on the right
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


class Row(NamedTuple):
    """One model on one test set: its system name, test set ("seen" or "unseen"), `compute_wer`'s ErrorRate, the
    decoding real-time factor and the training wall seconds."""

    system: str
    test_set: str
    rate: Any
    real_time_factor: float
    training_seconds: float


def _ticks(high: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least `high`."""
    raw = high / count
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 5, 10) if m * step >= raw)
    return [step * k for k in range(int(math.ceil(high / step)) + 1)]


def svg(rows: list[Row], title: str) -> str:
    """The plot: x the training seconds, y the %WER; a colour per system, a filled dot for unseen voices and a ring
    for seen ones."""
    xs = _ticks(max(r.training_seconds for r in rows) * 1.05)
    ys = _ticks(max(max(r.rate.wer for r in rows) * 1.1, 1.0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def at(seconds: float, wer: float) -> tuple[float, float]:
        return LEFT + plot_w * seconds / xs[-1], TOP + plot_h * (1 - wer / ys[-1])

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" '
        'font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="20" font-size="13">{escape(title)}</text>',
    ]
    for x in xs:
        px, _ = at(x, 0)
        out.append(f'<line x1="{px:.1f}" y1="{TOP}" x2="{px:.1f}" y2="{TOP + plot_h}" stroke="#ddd"/>')
        out.append(f'<text x="{px:.1f}" y="{TOP + plot_h + 16}" text-anchor="middle">{x:g}</text>')
    for y in ys:
        _, py = at(0, y)
        out.append(f'<line x1="{LEFT}" y1="{py:.1f}" x2="{LEFT + plot_w}" y2="{py:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{py + 4:.1f}" text-anchor="end">{y:g}</text>')
    out.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 10}" text-anchor="middle">training wall time (s)</text>')
    out.append(f'<text transform="translate(16 {TOP + plot_h / 2}) rotate(-90)" text-anchor="middle">%WER</text>')
    systems = list(dict.fromkeys(r.system for r in rows))
    for k, system in enumerate(systems):
        colour = COLOURS[k % len(COLOURS)]
        for r in (r for r in rows if r.system == system):
            px, py = at(r.training_seconds, r.rate.wer)
            fill = colour if r.test_set == "unseen" else "white"
            out.append(
                f'<circle cx="{px:.1f}" cy="{py:.1f}" r="5" fill="{fill}" stroke="{colour}" stroke-width="2">'
                f"<title>{escape(system)}, {r.test_set}: {r.rate.wer:.2f}% WER</title></circle>"
            )
        ly = TOP + 14 + 20 * k
        out.append(f'<circle cx="{WIDTH - RIGHT + 20}" cy="{ly - 4}" r="5" fill="{colour}" stroke="{colour}"/>')
        out.append(f'<text x="{WIDTH - RIGHT + 32}" y="{ly}">{escape(system)}</text>')
    ly = TOP + 14 + 20 * len(systems) + 10
    out.append(f'<text x="{WIDTH - RIGHT + 14}" y="{ly}">filled: unseen voice</text>')
    out.append(f'<text x="{WIDTH - RIGHT + 14}" y="{ly + 16}">ring: seen voices</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
