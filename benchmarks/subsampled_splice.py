"""The layer where a frame-subsampled TDNN moves to every `s`-th frame: symnet's lowering against its plain one.

With frame subsampling 3 (chain models), a layer `ReLU(Append(Offset(h, -1), h, Offset(h, 1)) @ W + b)` whose
outputs are wanted every third frame reads every frame of h, each output three of them. symnet's engine lowers
it as one product of h's frames reshaped to groups of three (symnet/_src/engine/splice.py); `plain` is what it
ran before (and runs under `lowering="plain"`): a gather per part, a concatenation, one product, and the
gathers' gradient scattered back. Also timed: the hand-written step with strided slices and a concatenation,
and one with `lax.conv_general_dilated` at window stride 3, so the lowering is compared with the fastest
reasonable alternative.

Each step is `jax.jit(jax.value_and_grad)` of a fixed linear function of the layer's outputs, with respect to
the weights and the input (as a hidden layer's backward needs both); the variants take one step each in turn,
for `--rounds` rounds of `--steps` steps; figures are the median step per round, and each variant's ratio to
`plain` in the same round. XLA on one thread when run as `taskset -c 0 python ... --one-thread`.

    python benchmarks/subsampled_splice.py [--rounds 5] [--steps 5] [--sequences 64] [--frames 162] [--dim 512]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

if "--one-thread" in sys.argv:
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"

import jax
import jax.numpy as jnp
import numpy as np

from machine import header
from symnet import Append, ComputationRequest, IndexSet, Input, Network, Offset, ReLU, Weight
from symnet.engine import compile

FACTOR, OFFSETS = 3, (-1, 0, 1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--sequences", type=int, default=64)
    p.add_argument("--frames", type=int, default=162, help="input frames (a multiple of 3)")
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--one-thread", action="store_true", help="XLA's CPU runtime on one thread")
    a = p.parse_args()
    n, frames, dim, rows = a.sequences, a.frames, a.dim, a.frames // FACTOR
    rng = np.random.default_rng(0)
    h = Input("input", dim)
    w = Weight(rng.normal(0, (3 * dim) ** -0.5, (3 * dim, dim)).astype(np.float32), name="w")
    b = Weight(np.zeros(dim, np.float32), name="b")
    net = Network(ReLU(Append(*(h if o == 0 else Offset(h, o) for o in OFFSETS)) @ w + b))
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=n, t=range(-1, frames - 1))},
        outputs={"output": IndexSet.range(n=n, t=range(0, frames - 2, FACTOR))},
    )
    x = jnp.asarray(rng.normal(size=(frames, n, dim)), jnp.float32)
    g = jnp.asarray(rng.normal(size=(rows, n, dim)), jnp.float32)
    params = {"w": jnp.asarray(net.params["w"]), "b": jnp.asarray(net.params["b"])}

    def engine(lowering: str):
        c = compile(net, request, lowering)
        line = [s for s in c.explain().splitlines() if s.startswith("spliced product")]
        print(f"{lowering}: {line[0] if line else 'slices (gathers), a concatenation and one product'}")
        return lambda p, x: c(net.replace(params=p), {"input": x})["output"]

    def hand_written(kind: str):
        def layer(p, x):
            if kind == "strided slices":
                parts = [jax.lax.slice_in_dim(x, j, j + FACTOR * (rows - 1) + 1, FACTOR, 0) for j in range(3)]
                y = jnp.concatenate(parts, -1).reshape(rows * n, 3 * dim) @ p["w"]
            elif kind == "reshape":
                y = x.reshape(rows, 3, n, dim).transpose(0, 2, 1, 3).reshape(rows * n, 3 * dim) @ p["w"]
            else:  # strided convolution
                kernel = p["w"].reshape(3, dim, dim)
                y = jax.lax.conv_general_dilated(x, kernel, (FACTOR,), "VALID", dimension_numbers=("WNC", "WIO", "WNC"))
            return jax.nn.relu(y.reshape(rows, n, dim) + p["b"])

        return layer

    variants = {"plain": engine("plain"), "symnet": engine("auto")}
    variants |= {k: hand_written(k) for k in ("reshape", "strided slices", "strided convolution")}
    steps = {
        k: jax.jit(jax.value_and_grad(lambda p, x, f=f: jnp.sum(f(p, x) * g), argnums=(0, 1)))
        for k, f in variants.items()
    }
    want = steps["plain"](params, x)
    for k, step in steps.items():
        got = step(params, x)
        for u, v in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_allclose(u, v, rtol=2e-3, atol=2e-3, err_msg=k)
    print(header())
    flops = 3 * 2 * rows * n * 3 * dim * dim
    print(f"{n} sequences, {frames} input frames, {rows} outputs each, {dim} -> {dim}: {flops / 1e9:.1f} GFLOP a step")
    times: dict[str, list[float]] = {k: [] for k in steps}
    for r in range(a.rounds):
        round_times: dict[str, list[float]] = {k: [] for k in steps}
        for _ in range(a.steps):
            for k, step in steps.items():
                start = time.perf_counter()
                jax.block_until_ready(step(params, x))
                round_times[k].append(time.perf_counter() - start)
        for k in steps:
            times[k].append(statistics.median(round_times[k]))
        print(f"round {r + 1}: " + ", ".join(f"{k} {times[k][-1] * 1e3:.1f} ms" for k in steps))
    for k in steps:
        ratios = [s / p for s, p in zip(times[k], times["plain"])]
        print(
            f"{k}: median {statistics.median(times[k]) * 1e3:.1f} ms, {statistics.median(ratios):.2f} of plain "
            f"(rounds {min(ratios):.2f}-{max(ratios):.2f}), {flops / statistics.median(times[k]) / 1e9:.0f} GFLOP/s"
        )


if __name__ == "__main__":
    main()
