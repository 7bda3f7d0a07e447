"""`make demo`: the seed example, then TDNNs trained on the built-in speech-like task.

    python -m symnet.demo            # the full demo (about a minute and a half on 2 cores)
    python -m symnet.demo --quick    # smaller settings (used by the test suite)

Part 1 fits `(1.0 + x) * Weight(2.0)` to data made with the weight 3.5.
Part 2 trains three networks on `symnet.datasets.HmmTask` and prints their
frame accuracy next to the best a classifier without context can reach and
the Bayes-optimal limit; it writes training curves (PNG) and the models.
"""

from __future__ import annotations

import argparse
import math
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from . import Append, Identity, Input, Literal, LogSoftmax, Network, Normal, Offset, ReLU, Weight, Zeros
from .datasets import HmmTask
from .train import fit
from .train.checkpoint import save as save_checkpoint


def seed_example(steps: int = 200) -> float:
    """Fit `(1.0 + x) * Weight(2.0)` to `y = (1 + x) * 3.5`; return the learnt weight."""
    x = Identity()
    expr = (1.0 + x) * Weight(2.0, name="w")
    print(f"expression   {expr!r}")
    tape = expr.forward(Literal(3.0))
    print(f"forward(3.0) {float(tape.value)}          (1 + 3) * 2")
    print(f"backward     {({k: float(v) for k, v in tape.backward(1.0).items()})}   d/dw = 1 + 3")

    net = Network(expr)
    xs = jnp.linspace(-1.0, 1.0, 32)
    ys = (1.0 + xs) * 3.5
    opt = optax.sgd(0.1)

    @jax.jit
    def step(net, state):
        tape = net.forward(xs)
        delta = 2.0 * (tape.value - ys) / xs.size  # d mean squared error / d output
        grads = tape.backward(delta)
        updates, state = opt.update(grads, state, net.params)
        return net.replace(params=optax.apply_updates(net.params, updates)), state

    state = opt.init(net.params)
    for _ in range(steps):
        net, state = step(net, state)
    w = float(net.params["w"])
    print(f"optax fit    w = {w:.4f}  (data made with w = 3.5)\n")
    return w


def affine(x, fan_in: int, fan_out: int, name: str):
    return x @ Weight(Normal((fan_in, fan_out), 1.0 / math.sqrt(fan_in)), name=f"{name}.w") + Weight(
        Zeros(fan_out), name=f"{name}.b"
    )


def splice(x, offsets):
    parts = [Offset(x, o) if o else x for o in offsets]
    return parts[0] if len(parts) == 1 else Append(*parts)


def networks(feat_dim: int, classes: int, width: int) -> dict[str, Network]:
    """The three contenders: no context, Kaldi's documentation example, a TDNN."""
    x = Input("input", feat_dim)
    no_context = LogSoftmax(affine(ReLU(affine(ReLU(affine(x, feat_dim, width, "l1")), width, width, "l2")),
                                   width, classes, "out"))
    kaldi_doc = LogSoftmax(affine(ReLU(affine(splice(x, (-1, 0, 1, 2)), 4 * feat_dim, 65, "affine1")),
                                  65, classes, "affine2"))
    h = ReLU(affine(splice(x, (-2, -1, 0, 1, 2)), 5 * feat_dim, width, "tdnn1"))
    h = ReLU(affine(splice(h, (-1, 0, 1)), 3 * width, width, "tdnn2"))
    h = ReLU(affine(splice(h, (-3, 0, 3)), 3 * width, width, "tdnn3"))
    tdnn = LogSoftmax(affine(h, width, classes, "output"))
    return {
        "no context (MLP)": Network(no_context, seed=1),
        "Kaldi doc example": Network(kaldi_doc, seed=2),
        "TDNN": Network(tdnn, seed=3),
    }


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description="symnet's demo")
    parser.add_argument("--quick", action="store_true", help="small settings (for tests)")
    parser.add_argument("--out", default="out", help="folder for the PNG and the models")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    print("== 1. The seed example ==")
    seed_example()

    print("== 2. TDNNs on the built-in task (symnet.datasets.HmmTask) ==")
    task = HmmTask.create(seed=0)
    # (training sequences, validation sequences, epochs, width, minibatch): plenty of fresh
    # data and few epochs, since the generator is free and small data overfits.
    sizes = (150, 40, 3, 64, 32) if args.quick else (2000, 150, 3, 128, 128)
    train = task.sample(sizes[0], seed=1)
    valid = task.sample(sizes[1], seed=2)
    print(f"{len(train)} training sequences ({train.num_frames} frames), {len(valid)} validation sequences, "
          f"{task.num_states} classes, {task.feat_dim}-dim features")
    bayes = task.bayes_accuracy(valid)
    single = task.single_frame_accuracy(valid)
    results, curves = {}, {}
    os.makedirs(args.out, exist_ok=True)
    for name, net in networks(task.feat_dim, task.num_states, sizes[3]).items():
        t = time.perf_counter()
        result = fit(net, train, optax.adam(2e-3), valid=valid, epochs=sizes[2], batch_size=sizes[4], chunk=20,
                     seed=0, progress=False)
        accuracy = result.history[-1].valid_accuracy
        results[name] = accuracy
        curves[name] = [h.valid_accuracy for h in result.history]
        left, right = net.context()
        print(f"  {name:20s} context ({left}, {right})  valid accuracy {accuracy:.3f}  "
              f"({time.perf_counter() - t:.0f} s)")
        filename = os.path.join(args.out, name.split(" ")[0].lower() + ".npz")
        save_checkpoint(filename, result.network, result.opt_state, _position(result))
    print(f"\n  {'best without context':20s}                  {single:.3f}   (Bayes-optimal single-frame classifier)")
    print(f"  {'Bayes limit':20s}                  {bayes:.3f}   (exact forward-backward posteriors)")
    _plot(curves, single, bayes, os.path.join(args.out, "training.png"))
    print(f"\nwrote {args.out}/training.png and the models {args.out}/*.npz "
          f"in {time.perf_counter() - started:.0f} s")
    results.update({"bayes": bayes, "single_frame": single})
    return results


def _position(result):
    from .train.checkpoint import Position

    last = result.history[-1]
    return Position(step=last.step, epoch=last.epoch + 1, batch=0)


def _plot(curves: dict[str, list[float]], single: float, bayes: float, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, values in curves.items():
        ax.plot(range(1, len(values) + 1), values, marker="o", label=name)
    ax.axhline(bayes, color="k", linestyle="--", label=f"Bayes limit {bayes:.3f}")
    ax.axhline(single, color="gray", linestyle=":", label=f"best without context {single:.3f}")
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation frame accuracy")
    ax.set_title("symnet on the built-in HMM task")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
