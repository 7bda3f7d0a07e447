"""A BLSTM written in symnet's expressions, trained with `fit` on the built-in task, against the Bayes limit.

    python benchmarks/blstm_accuracy.py [--sequences 2000] [--epochs 3] [--cells 64] [--chunk 100]
        [--layers 1] [--frame-layer 0] [--batch 32]

Each direction is the LSTM of docs/worked-examples.md (`IfDefined(Offset(Ref(...), ∓1))`,
gates by `DimRange`), `--cells` per direction, a log-softmax layer on both.
`fit` trains on chunks of `--chunk` frames (Adam, cosine-decayed from
`--lr`, `--batch` chunks a step (32); each chunk computed with its own sequence end, so
with `--chunk 300` every sequence of the task is one chunk; with several widths,
`--chunk 300,250,200,150,100`, each chunk is computed at the smallest that holds it); `--layers`
stacks BLSTM layers (each reads both directions of the one below) and
`--frame-layer D` puts a per-frame ReLU layer of width D in front; the
validation accuracy is then measured on whole
sequences with `Network.compute` (each utterance computed as if alone: the
backward direction starts at its own last frame) and printed beside the
task's Bayes limit, with the training and evaluation times.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import optax

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
    ReLU,
    Sigmoid,
    Tanh,
    Weight,
    Zeros,
)
from symnet.datasets import HmmTask, accuracy
from symnet.train import fit, make_chunks


def lstm(x: object, dim: int, cells: int, name: str, direction: int) -> Node:
    """One LSTM direction: h[t] from x[t] and (h, c) at t - direction."""
    h_prev = IfDefined(Offset(Ref(f"{name}.h"), -direction))
    c_prev = IfDefined(Offset(Ref(f"{name}.c"), -direction))
    gates = (
        x @ Weight(Normal((dim, 4 * cells), dim**-0.5))
        + h_prev @ Weight(Normal((cells, 4 * cells), cells**-0.5))
        + Weight(Zeros(4 * cells))
    )
    i, f = Sigmoid(DimRange(gates, 0, cells)), Sigmoid(DimRange(gates, cells, cells) + 1.0)
    g, o = Tanh(DimRange(gates, 2 * cells, cells)), Sigmoid(DimRange(gates, 3 * cells, cells))
    c = Node(f"{name}.c", f * c_prev + i * g)
    return Node(f"{name}.h", o * Tanh(c))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sequences", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--cells", type=int, default=64)
    parser.add_argument("--chunk", type=lambda text: [int(w) for w in text.split(",")], default=[100])
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--frame-layer", type=int, default=0)
    parser.add_argument("--batch", type=int, default=32, help="chunks a step")
    args = parser.parse_args()

    task = HmmTask.create(seed=0)
    train, valid = task.sample(args.sequences, seed=1), task.sample(150, seed=2)
    x, dim = Input("input", task.feat_dim), task.feat_dim
    if args.frame_layer:
        x = ReLU(x @ Weight(Normal((dim, args.frame_layer), dim**-0.5)) + Weight(Zeros(args.frame_layer)))
        dim = args.frame_layer
    for layer in range(args.layers):
        forward, backward = (lstm(x, dim, args.cells, f"{d}{layer}", s) for d, s in (("forward", 1), ("backward", -1)))
        both = x = Append(forward, backward)
        dim = 2 * args.cells
    scores = both @ Weight(Normal((2 * args.cells, task.num_states), (2 * args.cells) ** -0.5))
    net = Network(LogSoftmax(scores + Weight(Zeros(task.num_states))), seed=0)
    batch = args.batch
    widths = sorted(set(args.chunk))
    left, right = net.context()
    chunks = make_chunks(train.features, train.labels, chunk=widths[-1], left=left, right=right)
    per_width = np.unique(chunks.widths(widths), return_counts=True)[1]
    steps = args.epochs * int(sum(-(-n // batch) for n in per_width))
    started = time.perf_counter()
    result = fit(
        net,
        train,
        optax.adam(optax.cosine_decay_schedule(args.lr, steps)),
        epochs=args.epochs,
        batch_size=batch,
        chunk=widths,
        seed=0,
        progress=False,
    )
    trained = time.perf_counter() - started
    started = time.perf_counter()
    whole = accuracy([np.asarray(o) for o in result.network.compute(list(valid.features))], valid)
    evaluated = time.perf_counter() - started
    bayes = task.bayes_accuracy(valid)
    print(
        f"BLSTM, {args.layers} layer(s) of {args.cells} cells a direction"
        f"{f' after a per-frame layer of {args.frame_layer}' if args.frame_layer else ''}, "
        f"{args.sequences} sequences x {args.epochs} epochs "
        f"({steps} steps of {batch} chunks of {','.join(map(str, widths))} frames): whole-sequence validation accuracy "
        f"{whole:.3f}, Bayes limit {bayes:.3f} (gap {bayes - whole:.3f}); training {trained:.0f} s, "
        f"computing the {len(valid)} validation sequences {evaluated:.1f} s; training frames a second by epoch "
        f"{[round(h.frames_per_second) for h in result.history]}"
    )


if __name__ == "__main__":
    main()
