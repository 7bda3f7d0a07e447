"""Small networks many test modules build: a two-layer TDNN and a tanh recurrence.

from helpers.nets import rnn, splice, tdnn

A Network's parameter values follow from its Weights' names (given here, or
derived from where they sit) and its seed, so the same arguments give the same
numbers in every module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from symnet import (
    Append,
    IfDefined,
    Input,
    Layer,
    LogSoftmax,
    Network,
    Node,
    Normal,
    Offset,
    Ref,
    ReLU,
    Tanh,
    Weight,
    Zeros,
)

#: A matrix's Normal stddev; None: 1 / sqrt(fan-in).
Scale = float | None
#: A layer's bias: False none, True an unnamed Zeros bias, a str a Zeros bias of that name.
Bias = bool | str


def splice(x: Layer, offsets: Sequence[int]) -> Layer:
    """`x` at each of `offsets` (0: `x` itself), appended; a lone offset 0 is `x` itself, not an Append."""
    if tuple(offsets) == (0,):
        return x
    return Append(*[Offset(x, o) if o else x for o in offsets])


def affine(x: Layer, rows: int, cols: int, *, name: str | None = None, scale: Scale = 0.5, bias: Bias = False) -> Layer:
    """`x @ W` with W [rows, cols] ~ Normal(0, scale) named `name`, plus a Zeros bias if `bias` asks for one."""
    y = x @ Weight(Normal((rows, cols), 1 / math.sqrt(rows) if scale is None else scale), name=name)
    if bias is False:
        return y
    return y + Weight(Zeros(cols), name=None if bias is True else bias)


def tdnn(
    x: Input,
    *,
    hidden: int,
    out: int,
    first: Sequence[int] = (-1, 0, 1),
    second: Sequence[int] = (-1, 0, 1),
    names: tuple[str | None, str | None] = (None, None),
    node: str | None = None,
    scale: Scale | tuple[Scale, Scale] = 0.5,
    bias: Bias | tuple[Bias, Bias] = False,
    log_softmax: bool = False,
    seed: int = 0,
) -> Network:
    """Two affine layers with a ReLU between, as the Network's output "output":
    `x` spliced at `first` -> `hidden` (ReLU, in Node `node` if given) -> spliced at `second` -> `out`
    (LogSoftmax if `log_softmax`).

    Context (-min(first) - min(second), max(first) + max(second)). `names`, `scale` and `bias` are the two
    layers' matrix names, stddevs and biases (one `scale` or `bias` for both, or a pair).
    """
    s1, s2 = scale if isinstance(scale, tuple) else (scale, scale)
    b1, b2 = bias if isinstance(bias, tuple) else (bias, bias)
    h: Layer = ReLU(affine(splice(x, first), len(first) * x.dim, hidden, name=names[0], scale=s1, bias=b1))
    if node is not None:
        h = Node(node, h)
    y = affine(splice(h, second), len(second) * hidden, out, name=names[1], scale=s2, bias=b2)
    return Network(LogSoftmax(y) if log_softmax else y, seed=seed)


def rnn(
    inp: Layer,
    dim: int,
    hidden: int,
    *,
    lag: int = -1,
    name: str = "h",
    names: tuple[str | None, str | None] | None = None,
    scale: float | tuple[float, float] = 0.5,
) -> Node:
    """The Node `name` = tanh(inp @ W + IfDefined(name at t + lag) @ U), W [dim, hidden], U [hidden, hidden].

    A recurrence reading itself `lag` frames away (-1: forward in time, +1: backward); no input context
    beyond what `inp` reads. W and U are named `names`, by default (f"{name}.w", f"{name}.u"), with stddevs
    `scale` (one for both, or a pair).
    """
    w, u = (f"{name}.w", f"{name}.u") if names is None else names
    sw, su = scale if isinstance(scale, tuple) else (scale, scale)
    state = IfDefined(Offset(Ref(name), lag))
    return Node(
        name,
        Tanh(inp @ Weight(Normal((dim, hidden), sw), name=w) + state @ Weight(Normal((hidden, hidden), su), name=u)),
    )
