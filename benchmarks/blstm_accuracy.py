"""A BLSTM written in symnet's expressions, trained with `fit` on the built-in task, against the Bayes limit.

    python benchmarks/blstm_accuracy.py [--sequences 2000] [--epochs 3] [--cells 64] [--chunk 100]
        [--layers 1] [--frame-layer 0] [--batch 32]

The network is `symnet.demo.blstm` (the demo's): each direction the LSTM of
docs/worked-examples.md (`IfDefined(Offset(Ref(...), ∓1))`, gates by `DimRange`),
`--cells` per direction, a log-softmax layer on both.
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

from symnet._src.app.demo import blstm
from symnet.datasets import HmmTask, accuracy
from symnet.train import fit, steps_per_epoch


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
    net = blstm(
        task.feat_dim, task.num_states, cells=args.cells, layers=args.layers, frame_layer=args.frame_layer, seed=0
    )
    batch = args.batch
    widths = sorted(set(args.chunk))
    steps = args.epochs * steps_per_epoch(net, train, batch_size=batch, chunk=widths)
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
