"""How to lower W2's spliced affines (issue 29, item 8): hand-written JAX training steps of one TDNN, one per lowering.

W2 (BENCHMARKS.md) is six layers of `ReLU(Append(Offset(h, o) for o in offsets) @ W + b)` and Kaldi's
normalisation, then an affine output and log-softmax, over 64 chunks of 150 frames. Its products are fixed;
what can change is how a splice meets its matrix:

- `concat`: slices of `[T, N, D]` concatenated to `[T', N, k D]`, one product (the reference of run_all.py,
  and what symnet's engine runs under `lowering="plain"`);
- `per-offset`: no concatenation: `sum_j h[o_j + lo : o_j + lo + T'] @ W_j`, k products of `D` columns;
- `conv`: `lax.conv_general_dilated` over time, the offsets as a dilated kernel (they are evenly spaced in W2);
- `conv-tnc`: the same convolution on `[T, N, D]` as it is (no transposes), what symnet's engine ran
  before 2026-12-03;
- `conv-tnc-materialized`: `conv-tnc` with its input through `materialized` (a buffer of its own on CPU, so
  that XLA transposes that buffer instead of recomputing the ReLU and normalisation inside each transposed
  copy), what symnet's engine runs (symnet/_src/engine/splice.py, materialize.py);
- `conv-ntd`: the activations kept `[N, T, D]` from the input to the last spliced product (one transpose at
  each end), so that XLA's CPU convolution, which reads `[N, T, D]`, reads each source as it is; the layout a
  third value layout in the engine would give.

Each step is `jax.jit(jax.value_and_grad)` of the cross-entropy, parameters and inputs identical; within a
round the lowerings take one step each in turn (the order reversed every other step), and each figure is a
round's median step over the same round's median `concat` step, in wall-clock and in process CPU time (which
other jobs on a shared machine move less). The machine's matmul rate (a 2048 x 2048 product)
and each step's FLOPs (XLA's count) give the fraction of the rate each step reaches. `--sequences` and
`--frames` (output frames) change the size (W2: 64 and 150).

    python benchmarks/splice_lowering.py [--rounds 5] [--steps 4] [--sequences 64] [--frames 150]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from machine import header
from symnet._src.engine.materialize import materialized
from workloads import W2_SPLICES, _kaldi_normalize

SEQUENCES, FRAMES_OUT, DIM, WIDTH, OUTPUTS = 64, 150, 40, 512, 2000


def parameters(seed: int = 0) -> dict[str, jax.Array]:
    rng = np.random.default_rng(seed)
    p, dim = {}, DIM
    for i, offsets in enumerate(W2_SPLICES, start=1):
        fan_in = dim * len(offsets)
        p[f"w{i}"] = jnp.asarray(rng.normal(0, fan_in**-0.5, (fan_in, WIDTH)), jnp.float32)
        p[f"b{i}"] = jnp.zeros(WIDTH, jnp.float32)
        dim = WIDTH
    p["out.w"] = jnp.asarray(rng.normal(0, WIDTH**-0.5, (WIDTH, OUTPUTS)), jnp.float32)
    p["out.b"] = jnp.zeros(OUTPUTS, jnp.float32)
    return p


def concat(h: jax.Array, w: jax.Array, offsets: tuple[int, ...]) -> jax.Array:
    lo, hi = -min(offsets), max(offsets)
    n = h.shape[0] - lo - hi
    return jnp.concatenate([h[lo + o : lo + o + n] for o in offsets], axis=-1) @ w


def per_offset(h: jax.Array, w: jax.Array, offsets: tuple[int, ...]) -> jax.Array:
    lo, hi = -min(offsets), max(offsets)
    n, d = h.shape[0] - lo - hi, h.shape[-1]
    out = h[lo + offsets[0] : lo + offsets[0] + n] @ w[:d]
    for j, o in enumerate(offsets[1:], start=1):
        out = out + h[lo + o : lo + o + n] @ w[j * d : (j + 1) * d]
    return out


def conv(h: jax.Array, w: jax.Array, offsets: tuple[int, ...]) -> jax.Array:
    if len(offsets) == 1:
        return h @ w
    step = offsets[1] - offsets[0]
    assert all(b - a == step for a, b in zip(offsets, offsets[1:])), offsets
    d, k = h.shape[-1], len(offsets)
    x = jnp.transpose(h, (1, 2, 0))  # [N, D, T]
    kernel = jnp.transpose(w.reshape(k, d, -1), (2, 1, 0))  # [out, D, k]
    y = jax.lax.conv_general_dilated(x, kernel, (1,), "VALID", rhs_dilation=(step,))  # [N, out, T']
    return jnp.transpose(y, (2, 0, 1))


def conv_tnc(h: jax.Array, w: jax.Array, offsets: tuple[int, ...]) -> jax.Array:
    if len(offsets) == 1:
        return h @ w
    step = offsets[1] - offsets[0]
    kernel = w.reshape(len(offsets), h.shape[-1], -1)  # [k, D, out]
    spec = ("WNC", "WIO", "WNC")
    return jax.lax.conv_general_dilated(h, kernel, (1,), "VALID", rhs_dilation=(step,), dimension_numbers=spec)


def conv_tnc_materialized(h: jax.Array, w: jax.Array, offsets: tuple[int, ...]) -> jax.Array:
    return conv_tnc(materialized(h, w) if len(offsets) > 1 else h, w, offsets)


def conv_ntd(h: jax.Array, w: jax.Array, offsets: tuple[int, ...]) -> jax.Array:
    """The convolution of a source kept `[N, T, D]` (`loss_of(..., sequence_major=True)`), through
    `materialized` as in `conv-tnc-materialized`."""
    if len(offsets) == 1:
        return h @ w
    step = offsets[1] - offsets[0]
    kernel = w.reshape(len(offsets), h.shape[-1], -1)  # [k, D, out]
    spec = ("NWC", "WIO", "NWC")
    return jax.lax.conv_general_dilated(
        materialized(h, w), kernel, (1,), "VALID", rhs_dilation=(step,), dimension_numbers=spec
    )


def loss_of(splice: Callable, sequence_major: bool = False) -> Callable:
    """W2's mean cross-entropy with each spliced product made by `splice(h, w, offsets)`, on `[T, N, D]`
    activations, or on `[N, T, D]` up to the last spliced product where `sequence_major`."""
    last = max(i for i, offsets in enumerate(W2_SPLICES, start=1) if len(offsets) > 1)

    def loss(p: dict[str, jax.Array], x: jax.Array, labels: jax.Array) -> jax.Array:
        h = jnp.transpose(x, (1, 0, 2)) if sequence_major else x
        for i, offsets in enumerate(W2_SPLICES, start=1):
            h = _kaldi_normalize(jax.nn.relu(splice(h, p[f"w{i}"], offsets) + p[f"b{i}"]))
            if sequence_major and i == last:
                h = jnp.transpose(h, (1, 0, 2))
        logp = jax.nn.log_softmax(h @ p["out.w"] + p["out.b"]).reshape(-1, OUTPUTS)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))

    return loss


def matmul_rate(size: int = 2048, repeats: int = 10) -> float:
    a = jnp.ones((size, size), jnp.float32)
    f = jax.jit(lambda a: a @ a)
    f(a).block_until_ready()
    best = min(_timed(lambda: f(a).block_until_ready()) for _ in range(repeats))
    return 2 * size**3 / best


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--sequences", type=int, default=SEQUENCES)
    parser.add_argument("--frames", type=int, default=FRAMES_OUT, help="output frames (the input has 20 more)")
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((args.frames + 20, args.sequences, DIM)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, OUTPUTS, args.frames * args.sequences), jnp.int32)
    p = parameters()
    lowerings = (
        ("concat", concat),
        ("per-offset", per_offset),
        ("conv", conv),
        ("conv-tnc", conv_tnc),
        ("conv-tnc-materialized", conv_tnc_materialized),
        ("conv-ntd", conv_ntd),
    )
    steps = {name: jax.jit(jax.value_and_grad(loss_of(f, name == "conv-ntd"))) for name, f in lowerings}
    reference = steps["concat"](p, x, labels)
    flops = {}
    for name, step in steps.items():
        value, grads = step(p, x, labels)
        difference = max(float(jnp.max(jnp.abs(grads[k] - reference[1][k]))) for k in grads)
        cost = step.lower(p, x, labels).compile().cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        flops[name] = float(cost.get("flops", float("nan")))
        print(f"{name}: loss {float(value):.6f}, largest gradient difference from concat {difference:.1e}")
    rate = matmul_rate()
    print(f"{header()}; the machine's 2048x2048 matmul: {rate / 1e9:.0f} GFLOP/s")
    seconds: dict[str, list[float]] = {name: [] for name in steps}
    cpu: dict[str, list[float]] = {name: [] for name in steps}
    names = list(steps)
    for _ in range(args.rounds):
        times: dict[str, list[float]] = {name: [] for name in steps}
        cpu_times: dict[str, list[float]] = {name: [] for name in steps}
        for i in range(args.steps):  # one step of each lowering in turn, the order reversed every other step
            for name in names if i % 2 == 0 else names[::-1]:
                start = time.process_time()
                times[name].append(_timed(lambda step=steps[name]: jax.block_until_ready(step(p, x, labels))))
                cpu_times[name].append(time.process_time() - start)
        for name in steps:
            seconds[name].append(float(np.median(times[name])))
            cpu[name].append(float(np.median(cpu_times[name])))
    print(f"{args.sequences} sequences of {args.frames} output frames")
    print(
        "| lowering | median step (ms) per round | / concat per round | CPU time / concat per round "
        "| fraction of the matmul rate |"
    )
    print("|---|---|---|---|---|")
    for name in steps:
        ms = ", ".join(f"{1000 * s:.0f}" for s in seconds[name])
        ratio = ", ".join(f"{a / b:.2f}" for a, b in zip(seconds[name], seconds["concat"]))
        cpu_ratio = ", ".join(f"{a / b:.2f}" for a, b in zip(cpu[name], cpu["concat"]))
        fraction = flops[name] / float(np.median(seconds[name])) / rate
        print(f"| {name} | {ms} | {ratio} | {cpu_ratio} | {fraction:.2f} |")


if __name__ == "__main__":
    main()
