"""A small BLSTM written in symnet's expressions, random sequences, and each chunk's loss computed alone: for the
tests of training with sequence ends."""

from __future__ import annotations

import numpy as np

from symnet import (
    Append,
    DimRange,
    IfDefined,
    Input,
    LogSoftmax,
    Network,
    Node,
    Normal,
    Offset,
    Ref,
    Sigmoid,
    Tanh,
    Weight,
)

DIM, CELLS, CLASSES = 3, 4, 5


def lstm(x, name: str, direction: int) -> Node:
    h_prev = IfDefined(Offset(Ref(f"{name}.h"), -direction))
    c_prev = IfDefined(Offset(Ref(f"{name}.c"), -direction))
    gates = x @ Weight(Normal((DIM, 4 * CELLS), 0.7)) + h_prev @ Weight(Normal((CELLS, 4 * CELLS), 0.7))
    i, f = Sigmoid(DimRange(gates, 0, CELLS)), Sigmoid(DimRange(gates, CELLS, CELLS))
    g, o = Tanh(DimRange(gates, 2 * CELLS, CELLS)), Sigmoid(DimRange(gates, 3 * CELLS, CELLS))
    c = Node(f"{name}.c", f * c_prev + i * g)
    return Node(f"{name}.h", o * Tanh(c))


def network(directions=(1, -1), splice: bool = False) -> Network:
    x = Input("input", DIM)
    if splice:  # input context (1, 1) in front of the recurrences
        x = Append(Offset(x, -1), x, Offset(x, 1)) @ Weight(Normal((3 * DIM, DIM), 0.5))
    parts = [lstm(x, f"d{d}", d) for d in directions]
    both = parts[0] if len(parts) == 1 else Append(*parts)
    return Network(LogSoftmax(both @ Weight(Normal((CELLS * len(parts), CLASSES), 0.5))), seed=3)


def sequences(lengths, seed=0):
    rng = np.random.default_rng(seed)
    feats = [rng.standard_normal((n, DIM)).astype(np.float32) for n in lengths]
    labels = [rng.integers(0, CLASSES, n) for n in lengths]
    return feats, labels


def chunk_loss_reference(net, feats, labels, chunk):
    """Mean cross-entropy with every chunk computed alone by `Network.compute` (its frames only, cut at its end)."""
    total, frames = 0.0, 0
    for f, lab in zip(feats, labels):
        left, right = net.context()
        for start in range(0, len(f), chunk):
            stop = min(start + chunk, len(f))
            window = f[np.clip(np.arange(start - left, stop + right), 0, len(f) - 1)]  # clamped like the chunks
            out = np.asarray(net.compute([window], mode="valid")[0])
            total -= out[np.arange(stop - start), lab[start:stop]].sum()
            frames += stop - start
    return total / frames
