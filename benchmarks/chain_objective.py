"""The chain (LF-MMI) objective's forward + backward time, against cross-entropy on the same output shape.

    python benchmarks/chain_objective.py [--states 2000] [--arcs-per-state 5] [--pdfs 2000] [--batch 32]
        [--frames 50] [--num-states 150] [--repeats 5]

A random denominator graph (`--states`, about `--arcs-per-state` arcs each, random pdfs) and one random
left-to-right numerator graph per sequence (about `--num-states` states); outputs `[batch, frames, pdfs]`.
Both steps are one jitted `value_and_grad`; the ratio chain / cross-entropy is measured in the same run.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from symnet.chain import (
    ChainOptions,
    chain_objective,
    denominator_graph,
    fst_from_arcs,
    graph_arrays,
    numerator_graph,
    stack_graphs,
)


def timed(fn, *args, repeats):
    jax.block_until_ready(fn(*args))  # compile
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--states", type=int, default=2000)
    p.add_argument("--arcs-per-state", type=int, default=5)
    p.add_argument("--pdfs", type=int, default=2000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--frames", type=int, default=50)
    p.add_argument("--num-states", type=int, default=150)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    n = a.states * a.arcs_per_state
    src = np.sort(rng.integers(0, a.states, n))
    dst = rng.integers(0, a.states, n)
    weights = np.full(n, np.log(a.arcs_per_state))
    den = graph_arrays(denominator_graph(fst_from_arcs(src, dst, rng.integers(0, a.pdfs, n), weights), a.pdfs))
    nums = []
    for _ in range(a.batch):
        s = a.num_states
        st = np.arange(s - 1)
        nsrc, ndst = np.concatenate([st, st]), np.concatenate([st, st + 1])  # self-loops and forward arcs
        final = np.full(s, np.inf)
        final[-1] = 0.0
        fst = fst_from_arcs(nsrc, ndst, rng.integers(0, a.pdfs, nsrc.size), np.full(nsrc.size, 0.7), final=final)
        nums.append(numerator_graph(fst, a.pdfs))
    num = stack_graphs(nums)
    y = jnp.asarray(rng.normal(size=(a.batch, a.frames, a.pdfs)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, a.pdfs, (a.batch, a.frames)))
    options = ChainOptions(leaky_hmm_coefficient=0.1, l2_regularize=5e-5)

    chain = jax.jit(jax.value_and_grad(lambda v: -chain_objective(v, den, num, options=options).total))

    def xent(v):
        return -jnp.take_along_axis(jax.nn.log_softmax(v), labels[..., None], -1).sum()

    xent_step = jax.jit(jax.value_and_grad(xent))
    t_chain = timed(chain, y, repeats=a.repeats)
    t_xent = timed(xent_step, y, repeats=a.repeats)
    print(f"backend {jax.default_backend()}; den {a.states} states {n} arcs, {a.pdfs} pdfs, y {tuple(y.shape)}")
    ratio = t_chain / t_xent
    print(f"chain forward+backward {t_chain * 1e3:.1f} ms, cross-entropy {t_xent * 1e3:.2f} ms, ratio {ratio:.1f}")
    frames = a.batch * a.frames
    print(f"chain: {frames / t_chain:.0f} frames/s")


if __name__ == "__main__":
    main()
