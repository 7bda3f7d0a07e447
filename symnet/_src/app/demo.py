"""`make demo`: the seed example, TDNNs and a BLSTM trained on the built-in speech-like task, a Kaldi export.

    python -m symnet.demo            # about 2 minutes on 2 cores
    python -m symnet.demo --full     # the long runs that approach the Bayes limit (about 8 minutes)

Part 1 fits `(1.0 + x) * Weight(2.0)` to data made with the weight 3.5.
Part 2 trains three networks, written as Kaldi nnet3 configs, on
`symnet.datasets.HmmTask` and prints their frame accuracy after every epoch,
next to the best a classifier without context can reach and the Bayes-optimal
limit. Part 3 trains a BLSTM written in symnet's expressions on whole
sequences, each chunk computed at the smallest of five widths that holds its
sequence. Part 4 writes the trained TDNN as a Kaldi nnet3 model, reads it
back and runs it as `nnet3-compute` does. The training curves go to a PNG
(with matplotlib: `pip install 'symnet[plot]'`; `make demo` installs it), the
models to symnet files and Kaldi nnet3 files.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

import attrs
import jax
import jax.numpy as jnp
import numpy as np
import optax

from symnet import (
    Append,
    DimRange,
    Identity,
    IfDefined,
    Input,
    Literal,
    LogSoftmax,
    Network,
    Node,
    Normal,
    Offset,
    Ref,
    ReLU,
    Sigmoid,
    Tanh,
    Tape,
    Weight,
    Zeros,
)
from symnet.kaldi import parse_network, read_model, write_model
from symnet.train import EpochStats, fit, steps_per_epoch

from ..components import set_test_mode
from ..core.layer import Layer
from ..datasets import HmmTask
from ..kaldi.compute.nnet3_compute import ComputeOptions, Nnet3Computer
from ..saving.files import save

__all__ = [
    "blstm",
    "configs",
    "FILES",
    "FULL",
    "lstm",
    "main",
    "NO_MATPLOTLIB",
    "plot_curves",
    "QUICK",
    "seed_example",
    "Settings",
    "WHOLE_SEQUENCES",
]


def seed_example(steps: int = 200) -> float:
    """Fit `(1.0 + x) * Weight(2.0)` to `y = (1 + x) * 3.5`; return the learnt weight."""
    x = Identity()
    expr = (1.0 + x) * Weight(2.0, name="w")
    print(f"expression   {expr!r}")
    tape = expr.forward(Literal(3.0))
    print(f"forward(3.0) {float(tape.value)}          (1 + 3) * 2")
    print(f"backward     { ({k: float(v) for k, v in tape.backward(1.0).items()}) }   d/dw = 1 + 3")

    net = Network(expr)
    xs = jnp.linspace(-1.0, 1.0, 32)
    ys = (1.0 + xs) * 3.5
    opt = optax.sgd(0.1)

    @jax.jit
    def step(net: Network, state: optax.OptState) -> tuple[Network, optax.OptState]:
        tape = net.forward(xs)
        assert isinstance(tape, Tape)  # one output
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


def _affine(
    name: str,
    input: str,
    in_dim: int,
    out_dim: int,
    nonlinearity: str | None = "RectifiedLinear",
    batchnorm: bool = False,
) -> str:
    """Config lines of one layer: an affine component (Kaldi's default initialisation, zero bias), a
    nonlinearity and optionally a batch-norm after it (Kaldi's relu-batchnorm-layer)."""
    lines = [
        f"component name={name}.affine type=NaturalGradientAffineComponent input-dim={in_dim} "
        f"output-dim={out_dim} bias-stddev=0",
        f"component-node name={name}.affine component={name}.affine input={input}",
    ]
    if nonlinearity:
        lines += [
            f"component name={name}.{nonlinearity.lower()} type={nonlinearity}Component dim={out_dim}",
            f"component-node name={name}.{nonlinearity.lower()} component={name}.{nonlinearity.lower()} "
            f"input={name}.affine",
        ]
    if batchnorm:
        lines += [
            f"component name={name}.batchnorm type=BatchNormComponent dim={out_dim}",
            f"component-node name={name}.batchnorm component={name}.batchnorm input={name}.{str(nonlinearity).lower()}",
        ]
    return "\n".join(lines)


def _splice(node: str, offsets: tuple[int, ...]) -> str:
    parts = [f"Offset({node}, {o})" if o else node for o in offsets]
    return f"Append({', '.join(parts)})" if len(parts) > 1 else parts[0]


def configs(feat_dim: int, classes: int, width: int) -> dict[str, str]:
    """The three contenders as Kaldi nnet3 configs: no context, Kaldi's documentation example, a TDNN."""
    head = f"input-node name=input dim={feat_dim}"

    def output(last: str, dim: int) -> str:
        return "\n".join(
            [
                _affine("output", last, dim, classes, nonlinearity="LogSoftmax"),
                "output-node name=output input=output.logsoftmax objective=linear",
            ]
        )

    mlp = [
        head,
        _affine("layer1", "input", feat_dim, width),
        _affine("layer2", "layer1.rectifiedlinear", width, width),
        output("layer2.rectifiedlinear", width),
    ]
    # Kaldi's documentation example: Append(Offset(input, -1), ..., Offset(input, 2)), one hidden layer of 65.
    doc = [
        head,
        _affine("affine1", _splice("input", (-1, 0, 1, 2)), 4 * feat_dim, 65),
        output("affine1.rectifiedlinear", 65),
    ]
    # The TDNN: two per-frame layers (each frame's features mapped before any splicing), then three
    # spliced layers seeing frames t-6..t+6, each ReLU followed by batch-norm (Kaldi's relu-batchnorm-layer).
    tdnn = [
        head,
        _affine("frame1", "input", feat_dim, width, batchnorm=True),
        _affine("frame2", "frame1.batchnorm", width, width, batchnorm=True),
        _affine("tdnn1", _splice("frame2.batchnorm", (-2, -1, 0, 1, 2)), 5 * width, width, batchnorm=True),
        _affine("tdnn2", _splice("tdnn1.batchnorm", (-1, 0, 1)), 3 * width, width, batchnorm=True),
        _affine("tdnn3", _splice("tdnn2.batchnorm", (-3, 0, 3)), 3 * width, width, batchnorm=True),
        output("tdnn3.batchnorm", width),
    ]
    return {"no context (MLP)": "\n".join(mlp), "Kaldi doc example": "\n".join(doc), "TDNN": "\n".join(tdnn)}


FILES = {"no context (MLP)": "mlp", "Kaldi doc example": "kaldi-doc", "TDNN": "tdnn", "BLSTM": "blstm"}


def lstm(x: Layer, dim: int, cells: int, name: str, direction: int) -> Node:
    """One LSTM direction (docs/worked-examples.md): `h[t]` from `x[t]` and `(h, c)` at `t - direction`."""
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


def blstm(feat_dim: int, classes: int, *, cells: int, layers: int, frame_layer: int = 0, seed: int = 0) -> Network:
    """`layers` BLSTM layers (each reads both directions of the one below), behind a per-frame ReLU layer of
    width `frame_layer` (none if 0), and a log-softmax layer."""
    x: Layer = Input("input", feat_dim)
    dim = feat_dim
    if frame_layer:
        x = ReLU(x @ Weight(Normal((dim, frame_layer), dim**-0.5)) + Weight(Zeros(frame_layer)))
        dim = frame_layer
    for layer in range(layers):
        x = Append(*(lstm(x, dim, cells, f"{side}{layer}", d) for side, d in (("forward", 1), ("backward", -1))))
        dim = 2 * cells
    return Network(LogSoftmax(x @ Weight(Normal((dim, classes), dim**-0.5)) + Weight(Zeros(classes))), seed=seed)


#: Chunk widths for whole sequences of the task (100 to 300 frames): each is computed at the smallest that holds it.
WHOLE_SEQUENCES = (300, 250, 200, 150, 100)


@attrs.frozen
class Settings:
    """The sizes of a demo run: the TDNNs' data and training, then the BLSTM's."""

    train: int  # training sequences (the generator is free: fresh data beats more epochs on the same)
    valid: int  # validation sequences
    epochs: int  # the TDNNs' epochs: one point of each curve per epoch
    width: int  # the TDNN's hidden width
    batch: int  # the TDNNs' minibatch, in 20-frame chunks
    blstm_train: int  # the BLSTM's training sequences (the TDNNs' where as many, else drawn afresh)
    cells: int  # BLSTM cells a direction
    layers: int  # BLSTM layers
    frame_layer: int  # the per-frame ReLU layer under the BLSTM (0: none)
    blstm_epochs: int
    blstm_lr: float
    blstm_batch: int  # whole sequences per minibatch


#: `make demo`: every part in about two minutes on 2 cores.
QUICK = Settings(
    train=2000,
    valid=150,
    epochs=6,
    width=64,
    batch=64,
    blstm_train=1000,
    cells=32,
    layers=1,
    frame_layer=0,
    blstm_epochs=6,
    blstm_lr=2e-2,
    blstm_batch=16,
)
#: `--full`: the runs that come within 0.02 of the Bayes limit (docs/training.md has their figures).
FULL = Settings(
    train=12000,
    valid=150,
    epochs=3,
    width=128,
    batch=128,
    blstm_train=12000,
    cells=64,
    layers=2,
    frame_layer=64,
    blstm_epochs=3,
    blstm_lr=1e-2,
    blstm_batch=32,
)


def _progress(name: str, epochs: int, started: float) -> Callable[[EpochStats], None]:
    """An `on_epoch` that prints each epoch's validation accuracy as it comes."""

    def report(stats: EpochStats) -> None:
        print(
            f"    {name:20s} epoch {stats.epoch + 1}/{epochs}: valid accuracy {stats.valid_accuracy:.3f}  "
            f"({time.perf_counter() - started:.0f} s)",
            flush=True,
        )

    return report


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description="symnet's demo (about 2 minutes on 2 cores)")
    parser.add_argument(
        "--full", action="store_true", help="the long runs that approach the Bayes limit (about 8 minutes)"
    )
    parser.add_argument("--out", default="out", help="folder for the PNG and the models")
    args = parser.parse_args(argv)
    settings = FULL if args.full else QUICK
    started = time.perf_counter()
    print("== 1. The seed example ==", flush=True)
    seed_example()

    print("== 2. TDNNs on the built-in task (symnet.datasets.HmmTask) ==", flush=True)
    task = HmmTask.create(seed=0)
    train = task.sample(settings.train, seed=1)
    valid = task.sample(settings.valid, seed=2)
    print(
        f"{len(train)} training sequences ({train.num_frames} frames), {len(valid)} validation sequences, "
        f"{task.num_states} classes, {task.feat_dim}-dim features",
        flush=True,
    )
    bayes = task.bayes_accuracy(valid)
    single = task.single_frame_accuracy(valid)
    print(f"  best without context {single:.3f}, Bayes limit {bayes:.3f}", flush=True)
    results: dict[str, float] = {}
    curves: dict[str, list[float]] = {}
    os.makedirs(args.out, exist_ok=True)
    trained: dict[str, Any] = {}
    for seed, (name, config) in enumerate(configs(task.feat_dim, task.num_states, settings.width).items(), start=1):
        net = parse_network(config, seed=seed, file=f"<{name}>")
        t = time.perf_counter()
        steps = settings.epochs * steps_per_epoch(net, train, batch_size=settings.batch, chunk=20)
        optimizer = optax.adam(optax.cosine_decay_schedule(3e-3, steps))
        result = fit(
            net,
            train,
            optimizer,
            valid=valid,
            epochs=settings.epochs,
            batch_size=settings.batch,
            chunk=20,
            seed=0,
            progress=False,
            on_epoch=_progress(name, settings.epochs, t),
        )
        curves[name] = [h.valid_accuracy for h in result.history if h.valid_accuracy is not None]
        accuracy = results[name] = curves[name][-1]
        left, right = net.context()
        print(
            f"  {name:20s} context ({left}, {right})  valid accuracy {accuracy:.3f}  ({time.perf_counter() - t:.0f} s)",
            flush=True,
        )
        trained[name] = result.network  # with the config's objectives
        save(os.path.join(args.out, FILES[name] + ".npz"), trained[name])  # symnet's network file

    print("\n== 3. A BLSTM in symnet's expressions, trained on whole sequences ==", flush=True)
    net = blstm(
        task.feat_dim,
        task.num_states,
        cells=settings.cells,
        layers=settings.layers,
        frame_layer=settings.frame_layer,
        seed=4,
    )
    blstm_train = train if settings.blstm_train == len(train) else task.sample(settings.blstm_train, seed=3)
    t = time.perf_counter()
    steps = settings.blstm_epochs * steps_per_epoch(
        net, blstm_train, batch_size=settings.blstm_batch, chunk=WHOLE_SEQUENCES
    )
    optimizer = optax.adam(optax.cosine_decay_schedule(settings.blstm_lr, steps))
    # Every sequence is one chunk, computed with its own end (the backward recurrence starts at its last frame).
    result = fit(
        net,
        blstm_train,
        optimizer,
        valid=valid,
        epochs=settings.blstm_epochs,
        batch_size=settings.blstm_batch,
        chunk=WHOLE_SEQUENCES,
        progress=False,
        on_epoch=_progress("BLSTM", settings.blstm_epochs, t),
    )
    curves["BLSTM"] = [h.valid_accuracy for h in result.history if h.valid_accuracy is not None]
    results["BLSTM"] = accuracy = curves["BLSTM"][-1]
    behind = f" behind a per-frame layer of {settings.frame_layer}" if settings.frame_layer else ""
    print(
        f"  {settings.layers} layer(s) of {settings.cells} cells a direction{behind}, {len(blstm_train)} "
        f"sequences: valid accuracy {accuracy:.3f}  ({time.perf_counter() - t:.0f} s)",
        flush=True,
    )
    save(os.path.join(args.out, FILES["BLSTM"] + ".npz"), result.network)

    print("\n== 4. Kaldi nnet3 models ==", flush=True)
    for name, model in trained.items():
        write_model(os.path.join(args.out, FILES[name] + ".raw"), model, binary=True)  # nnet3-copy reads it
    path = os.path.join(args.out, FILES["TDNN"] + ".raw")
    back = read_model(path).network  # the file read back, computed as nnet3-compute does
    computer = Nnet3Computer(back, ComputeOptions(frames_per_chunk=50))
    difference = max(
        float(np.abs(np.asarray(ours) - kaldi_style).max())
        for ours, kaldi_style in zip(
            set_test_mode(trained["TDNN"], True).compute(list(valid.features[:20])),
            computer.compute_many(list(valid.features[:20])),
            strict=True,
        )
    )
    print(
        f"  wrote {', '.join(FILES[n] + '.raw' for n in trained)}; {path} read back and run as nnet3-compute "
        f"(50-frame chunks) gives symnet's outputs (largest difference {difference:.2g})",
        flush=True,
    )

    print(f"\n  {'best without context':20s}                  {single:.3f}   (Bayes-optimal single-frame classifier)")
    print(f"  {'Bayes limit':20s}                  {bayes:.3f}   (exact forward-backward posteriors)")
    plotted = plot_curves(curves, single, bayes, os.path.join(args.out, "training.png"))
    png = f"{args.out}/training.png, " if plotted else ""
    print(
        f"\nwrote {png}the models as symnet files ({args.out}/*.npz) and the TDNNs as Kaldi "
        f"nnet3 files ({args.out}/*.raw) in {time.perf_counter() - started:.0f} s"
        + ("" if args.full else "; python -m symnet.demo --full trains longer, closer to the Bayes limit"),
        flush=True,
    )
    results.update({"bayes": bayes, "single_frame": single, "kaldi_difference": difference})
    return results


#: What the demo prints when it cannot draw the training curves.
NO_MATPLOTLIB = (
    "matplotlib is not installed, so there is no training.png: install the plot extra "
    "(pip install 'symnet[plot]'; make demo does) to get it"
)


def plot_curves(curves: dict[str, list[float]], single: float, bayes: float, path: str) -> bool:
    """Write the validation accuracy per epoch of each network, with both ceilings, as a PNG at `path`.

    matplotlib is optional (the `plot` extra): without it, print how to install it and return False.
    """
    try:
        import matplotlib
    except ImportError:
        print(NO_MATPLOTLIB)
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, values in curves.items():
        ax.plot(range(1, len(values) + 1), values, marker="o", label=name)
    ax.axhline(bayes, color="k", linestyle="--", label=f"Bayes limit {bayes:.3f}")
    ax.axhline(single, color="gray", linestyle=":", label=f"best without context {single:.3f}")
    ax.set_xticks(range(1, max(len(v) for v in curves.values()) + 1))
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation frame accuracy")
    ax.set_title("symnet on the built-in HMM task")
    ax.legend(loc="center right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


if __name__ == "__main__":
    main()
