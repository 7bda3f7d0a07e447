"""Receptive fields: which frames of every node one output frame reads, from the engine's plan of a small request."""

from __future__ import annotations

from typing import Any

from ..core.descriptor import Input, Node
from ..core.index import IndexSet, decode
from ..core.layer import Identity
from ..engine.compiling import compile
from ..engine.context import output_name
from ..engine.inspect import input_reads
from ..engine.request import ComputationRequest
from .graph import GraphView
from .html import CHAR_W, FONT, MARGIN, Svg, escape
from .labels import COLOURS, kind, label

__all__ = ["ReceptiveField", "receptive_field"]


class ReceptiveField:
    """Which frames of each node one output frame reads (planned by the engine on a small request).

    `frames` maps a row label (an input or Node name, else a short label with
    the node id) to the sorted frames that node computes for output frame `t`;
    `window` is the span of input frames offered. Shows as an SVG grid
    (`_repr_svg_`, `svg()`), prints as a text grid.
    """

    def __init__(
        self, frames: dict[str, list[int]], window: tuple[int, int], t: int, output: str, kinds: dict[str, str]
    ):
        self.frames = frames
        self.window = window
        self.t = t
        self.output = output
        self.kinds = kinds

    @property
    def input_frames(self) -> dict[str, list[int]]:
        """The frames of each input that output frame `t` reads."""
        return {k: v for k, v in self.frames.items() if self.kinds.get(k) == "input"}

    def __repr__(self) -> str:
        lo, hi = self.window
        width = max((len(k) for k in self.frames), default=4)
        head = " " * (width + 1) + "".join(
            "|" if t == self.t else ("+" if t % 5 == 0 else " ") for t in range(lo, hi + 1)
        )
        lines = [f"ReceptiveField(output {self.output!r}, t={self.t}, frames {lo}..{hi})", head]
        for name, frames in self.frames.items():
            got = set(frames)
            lines.append(name.ljust(width) + " " + "".join("#" if t in got else "." for t in range(lo, hi + 1)))
        return "\n".join(lines)

    def svg(self, cell: int = 14) -> Svg:
        lo, hi = self.window
        names = list(self.frames)
        label_w = CHAR_W * max((len(n) for n in names), default=4) + 12
        frames = list(range(lo, hi + 1))
        step = 1 if len(frames) <= 40 else 5
        footer = f"frames of every node that output {self.output!r} at t={self.t} reads"
        w = max(MARGIN * 2 + label_w + cell * len(frames), MARGIN * 2 + 6.0 * len(footer))
        h = MARGIN * 2 + 16 + cell * len(names) + 14
        out = [
            f'<svg xmlns="http://www.w3.org/2000/svg" class="symnet-receptive-field" width="{w:.0f}" '
            f'height="{h:.0f}" viewBox="0 0 {w:.0f} {h:.0f}" style="{FONT}">'
        ]
        x0, y0 = MARGIN + label_w, MARGIN + 16
        for j, t in enumerate(frames):
            if t % step == 0 or t == self.t:
                weight = ' font-weight="bold"' if t == self.t else ""
                out.append(
                    f'<text class="frame" x="{x0 + j * cell + cell / 2:.1f}" y="{y0 - 5:.1f}" '
                    f'text-anchor="middle" font-size="9" fill="#555"{weight}>{t}</text>'
                )
        for i, name in enumerate(names):
            y = y0 + i * cell
            out.append(
                f'<text x="{x0 - 6:.1f}" y="{y + cell - 3:.1f}" text-anchor="end" font-size="11" '
                f'fill="#222">{escape(name)}</text>'
            )
            got = set(self.frames[name])
            colour = COLOURS.get(self.kinds.get(name, "op"), COLOURS["op"])[1]
            for j, t in enumerate(frames):
                fill = colour if t in got else "#f4f4f4"
                out.append(
                    f'<rect x="{x0 + j * cell:.1f}" y="{y:.1f}" width="{cell - 1}" height="{cell - 1}" '
                    f'fill="{fill}"><title>{escape(name)} t={t}{" (read)" if t in got else ""}</title></rect>'
                )
        tx = x0 + (self.t - lo) * cell
        out.append(
            f'<rect x="{tx - 1:.1f}" y="{y0 - 1:.1f}" width="{cell + 1}" height="{cell * len(names) + 1}" '
            'fill="none" stroke="#d32f2f" stroke-width="1.5"/>'
        )
        out.append(f'<text x="{MARGIN}" y="{h - MARGIN + 4:.0f}" font-size="10" fill="#555">{escape(footer)}</text>')
        out.append("</svg>")
        return Svg("".join(out))

    def _repr_svg_(self) -> str:
        return str(self.svg())


def receptive_field(
    network: Any, output: str | None = None, *, t: int = 0, window: tuple[int, int] | None = None, nodes: str = "auto"
) -> ReceptiveField:
    """The frames of every node that output frame `t` reads.

    Plans the request "output frame `t` of one sequence, every input on
    `window`" (default: the network's context plus a margin; 8 frames back for
    a recurrence, whose reach is unbounded) and reads each node's Indexes from
    the compiled Computation's rows. `nodes='auto'` shows inputs and named
    Nodes when the network has Nodes, else every indexed node; `'all'` every
    indexed node.
    """
    net = network
    name = output_name(net, output)
    info = GraphView(net)
    g = info.graph
    if window is None:
        try:
            left, right = net.context(name)
        except Exception:
            left, right = 0, 0
        margin = 8 if info.recurrent() else 0
        window = (t - left - margin, t + right + margin)
    lo, hi = int(window[0]), int(window[1])
    request = ComputationRequest(
        inputs={k: IndexSet.range(n=1, t=(lo, hi + 1)) for k in g.inputs},
        outputs={name: IndexSet.range(n=1, t=(t, t + 1))},
    )
    computation = compile(net, request)
    read = input_reads(computation)
    named = any(isinstance(layer, Node) for layer in computation.graph.layers)
    out_id = computation.output_ids[name]
    frames: dict[str, list[int]] = {}
    kinds: dict[str, str] = {}
    order = sorted(computation.rows, key=lambda nid: (-info.depth[nid], nid))
    for nid in order:
        layer = computation.graph.layers[nid]
        is_input = isinstance(layer, (Input, Identity))
        if nodes == "auto" and named and not (is_input or isinstance(layer, Node) or nid == out_id):
            continue
        if is_input:
            key = getattr(layer, "name", "input")
        elif isinstance(layer, Node):
            key = layer.name
        else:
            key = f"{label(layer)} #{nid}"
        keys = read.get(nid, computation.rows[nid].keys) if is_input else computation.rows[nid].keys
        frames[key] = sorted(set(int(v) for v in decode(keys)[1]))
        kinds[key] = kind(layer)
    return ReceptiveField(frames, (lo, hi), t, name, kinds)
