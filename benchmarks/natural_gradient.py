"""Does Kaldi's natural gradient speed up plain SGD? A TDNN of NaturalGradientAffineComponents on HmmTask.

The same network (same initial parameters), the same minibatches in the same
order and the same number of steps are trained with `optax.sgd(lr)`, once with
the exact gradient and once with Kaldi's online natural gradient
(`symnet.natural_gradient.optimizer`: the components' backward preconditions
input values and output derivatives with the per-component states carried in
the optimiser state), for a few learning rates. After the given steps the
validation loss and frame accuracy are measured; the wall time is the training
loop's (after one step of warm-up and compilation), with one BLAS thread, as `fit` trains.

    python benchmarks/natural_gradient.py                 # 200 sequences, 3 learning rates
    python benchmarks/natural_gradient.py --quick         # a smoke test

`main()` returns the rows; the script prints a markdown table.

The table it gives, with the machine and date, is in docs/training.md ("Natural gradient").
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np
import optax

import symnet
from symnet import natural_gradient
from symnet._src.train import fit_data
from symnet._src.train import trainer as training
from symnet._src.train.objectives import Linear
from symnet.datasets import HmmTask
from symnet.kaldi import build_component
from symnet.train import one_blas_thread


def tdnn(feat: int, classes: int, width: int, seed: int) -> symnet.Network:
    """Kaldi-style TDNN: splices (-2..2), (-1,0,1), (-3,0,3), each a NaturalGradientAffineComponent + ReLU."""
    x = symnet.Input("input", feat)

    def splice(h, offsets):
        return symnet.Append(*[symnet.Offset(h, o) if o else h for o in offsets])

    def layer(name, h, offsets, dim_in, dim_out):
        a = build_component(
            "NaturalGradientAffineComponent",
            name,
            {"input-dim": len(offsets) * dim_in, "output-dim": dim_out},
            splice(h, offsets),
        )
        return build_component("RectifiedLinearComponent", f"{name}.relu", {"dim": dim_out}, a)

    h = layer("tdnn1", x, (-2, -1, 0, 1, 2), feat, width)
    h = layer("tdnn2", h, (-1, 0, 1), width, width)
    h = layer("tdnn3", h, (-3, 0, 3), width, width)
    out = build_component("NaturalGradientAffineComponent", "output", {"input-dim": width, "output-dim": classes}, h)
    return symnet.Network(build_component("LogSoftmaxComponent", "prob", {"dim": classes}, out), seed=seed)


def run(net, train_chunks, valid_chunks, opt, *, steps: int, batch_size: int, seed: int, evals: tuple[int, ...]):
    trainer = training.Trainer(
        net, opt, batch_size=batch_size, chunks=train_chunks, objective=Linear(), input="input", output="output"
    )
    state = opt.init(net.params)
    order: list = []
    epoch = 0
    while len(order) < steps + 1:
        perm = np.random.default_rng([seed, epoch]).permutation(len(train_chunks))
        order += trainer.batches(train_chunks, perm)
        epoch += 1
    x, t, w = trainer.arrays(trainer.minibatch(0, train_chunks, order[0]))
    net, state, loss, _, _, _, _ = trainer.step(net, state, x, t, w)  # warm-up and compile: step 1
    jax.block_until_ready(loss)
    points = {}
    elapsed = 0.0
    for step in range(2, steps + 1):
        x, t, w = trainer.arrays(trainer.minibatch(step - 1, train_chunks, order[step - 1]))
        started = time.perf_counter()
        net, state, loss, _, _, _, _ = trainer.step(net, state, x, t, w)
        jax.block_until_ready(loss)
        elapsed += time.perf_counter() - started
        if not np.isfinite(float(loss)):
            points[step] = (float("nan"), float("nan"), elapsed)
            break
        if step in evals:
            valid_loss, valid_acc = trainer.score(net, valid_chunks)
            points[step] = (valid_loss, valid_acc, elapsed)
    return points


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=200)
    parser.add_argument("--valid", type=int, default=50)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--evals", default="50,100,300", help="steps at which to measure validation")
    parser.add_argument("--lrs", default="0.03,0.1,0.3")
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--chunk", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.sequences, args.valid, args.steps, args.evals, args.lrs, args.width = 30, 10, 20, "10,20", "0.1", 32
    evals = tuple(int(s) for s in args.evals.split(","))
    task = HmmTask.create(seed=0)
    train = task.sample(args.sequences, seed=1)
    valid = task.sample(args.valid, seed=2)
    net0 = tdnn(task.feat_dim, task.num_states, args.width, args.seed)
    train_chunks = fit_data.as_chunks(train, net0, args.chunk, "output")
    valid_chunks = fit_data.as_chunks(valid, net0, args.chunk, "output")
    print(
        f"HmmTask: {len(train)} training sequences ({train.num_frames} frames), {len(valid)} validation "
        f"({valid.num_frames} frames), {task.num_states} classes; TDNN width {args.width}, "
        f"{sum(int(np.size(v)) for v in net0.params.values())} parameters; minibatches of {args.batch} x "
        f"{args.chunk} frames; plain SGD, {args.steps} steps; jax {jax.__version__} on {jax.devices()[0].platform}"
    )
    rows = []
    for lr in (float(s) for s in args.lrs.split(",")):
        for ng_on in (False, True):
            opt = optax.sgd(lr)
            if ng_on:
                opt = natural_gradient.optimizer(opt, net0)
            with one_blas_thread():  # as fit trains (symnet._src.train.blas_threads)
                points = run(
                    net0,
                    train_chunks,
                    valid_chunks,
                    opt,
                    steps=args.steps,
                    batch_size=args.batch,
                    seed=args.seed,
                    evals=evals,
                )
            rows.append({"lr": lr, "natural_gradient": ng_on, "points": points})
    header = "| lr | natural gradient | " + " | ".join(f"valid acc / loss @ {s}" for s in evals) + " | train time (s) |"
    print()
    print(header)
    print("|" + "---|" * (3 + len(evals)))
    for row in rows:
        cells = []
        for s in evals:
            if s in row["points"]:
                loss, acc, _ = row["points"][s]
                cells.append(f"{acc:.3f} / {loss:.3f}")
            else:
                cells.append("diverged")
        total = max(p[2] for p in row["points"].values()) if row["points"] else float("nan")
        print(
            f"| {row['lr']:g} | {'on' if row['natural_gradient'] else 'off'} | "
            + " | ".join(cells)
            + f" | {total:.1f} |"
        )
    print(
        f"\nsingle-frame Bayes accuracy {task.single_frame_accuracy(valid):.3f}, "
        f"Bayes limit {task.bayes_accuracy(valid):.3f} (on the validation set)"
    )
    return rows


if __name__ == "__main__":
    main()
