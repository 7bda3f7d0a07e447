"""W3's floor on this machine: the matrix products an LSTM train step cannot avoid, against the W3 steps.

A step of W3 (32 sequences x 200 frames, 256 cells) must run, in order, 200
products `h @ W_h` (32x256 by 256x1024) forward and 200 products `d @ W_h^T`
(32x1024 by 1024x256) backward, and once the recurrent weight's gradient
(256x6400 by 6400x1024). This times each of them alone (loops of the products
with nothing else in them, a `tanh` keeping each step dependent on the last)
and prints them beside the symnet W3 step and the fastest hand-written reference
variant's (run_all.py's `step_times`) of the same run.

    python benchmarks/lstm_floor.py [--steps 20]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from machine import header
from run_all import step_times
from workloads import w3


def median_time(run, steps: int) -> float:
    for _ in range(3):
        run()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    print(header())
    frames, batch, cells = 200, 32, 256
    rng = np.random.default_rng(0)
    w = jnp.asarray(rng.standard_normal((cells, 4 * cells)) / 16, jnp.float32)
    w_t = jnp.asarray(np.asarray(w).T.copy())
    h = jnp.asarray(rng.standard_normal((batch, cells)), jnp.float32)
    hs = jnp.asarray(rng.standard_normal((frames * batch, cells)), jnp.float32)
    ds = jnp.asarray(rng.standard_normal((frames * batch, 4 * cells)), jnp.float32)
    forward = jax.jit(lambda w, h: jax.lax.fori_loop(0, frames, lambda i, h: jnp.tanh(h @ w)[:, :cells], h))
    backward = jax.jit(lambda w_t, d: jax.lax.fori_loop(0, frames, lambda i, d: jnp.tile(jnp.tanh(d @ w_t), (1, 4)), d))
    gradient = jax.jit(lambda hs, ds: hs.T @ ds)
    d = jnp.tile(h, (1, 4))
    parts = {
        "200 forward products h @ W_h": median_time(lambda: jax.block_until_ready(forward(w, h)), args.steps),
        "200 backward products d @ W_h^T": median_time(lambda: jax.block_until_ready(backward(w_t, d)), args.steps),
        "the weight gradient's product": median_time(lambda: jax.block_until_ready(gradient(hs, ds)), args.steps),
    }
    symnet, reference, variant = step_times(w3(), args.steps)
    floor = sum(parts.values())
    print("| part | ms | of the reference step |")
    print("|---|---|---|")
    for name, t in parts.items():
        print(f"| {name} | {t * 1e3:.1f} | {t / reference:.2f} |")
    print(f"| their sum (the floor) | {floor * 1e3:.1f} | {floor / reference:.2f} |")
    print(f"| symnet W3 step | {symnet * 1e3:.1f} | {symnet / reference:.2f} |")
    print(
        f"| reference W3 step (hand-written lax.scan, the fastest variant: {variant}) | {reference * 1e3:.1f} | 1.00 |"
    )


if __name__ == "__main__":
    main()
