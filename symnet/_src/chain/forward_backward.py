"""The chain forward-backward: total log-probability of a graph's paths and pdf occupations, in one XLA program.

For a sequence of `T` frames of network outputs `y[t, pdf]` (pseudo log-likelihoods), the
probability of a path is the product of its arcs' `prob * exp(y[t, pdf])`, times the initial
probability of its first state and the final probability of its last. With the leaky HMM
(Kaldi's denominator), after every frame (and before the first) a fraction `leaky` of the total
probability mass is added, spread over the states in proportion to the initial probabilities:
`alpha' = alpha + leaky * sum(alpha) * initial`. Kaldi scales each frame by an arbitrary factor
for numerics only; here each frame's vector is normalised to sum to 1 and the log of the factor
accumulated, so the result is the same quantity.

Runs as `jax.lax.scan` over frames (forward, then backward), `vmap`-ed over sequences with
per-sequence lengths (frames at or past a sequence's length change nothing); memory is the
per-frame state vectors, linear in frames. The result is not differentiated through: the
derivative of the log-probability with respect to `y` is the occupation it returns, used by the
custom VJP in `symnet._src.chain.objective`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import ChainError
from .graph import ChainGraph

__all__ = ["forward_backward", "graph_arrays", "GraphArrays", "stack_graphs"]


class GraphArrays(NamedTuple):
    """A `ChainGraph` (or a padded stack of them, with a leading sequence axis) as JAX arrays."""

    src: jax.Array
    dst: jax.Array
    pdf: jax.Array
    prob: jax.Array
    initial: jax.Array
    final: jax.Array


def graph_arrays(graph: ChainGraph, dtype: jnp.dtype = jnp.float32) -> GraphArrays:
    """One graph's arrays, shared by every sequence (the denominator)."""
    return GraphArrays(
        jnp.asarray(graph.src, jnp.int32),
        jnp.asarray(graph.dst, jnp.int32),
        jnp.asarray(graph.pdf, jnp.int32),
        jnp.asarray(graph.prob, dtype),
        jnp.asarray(graph.initial, dtype),
        jnp.asarray(graph.final, dtype),
    )


def stack_graphs(graphs: Sequence[ChainGraph], dtype: jnp.dtype = jnp.float32) -> GraphArrays:
    """One graph per sequence (the numerators), padded to the largest state and arc counts: padded
    states have no initial or final probability, padded arcs probability 0."""
    if not graphs:
        raise ChainError("no numerator graphs given")
    pdfs = {g.num_pdfs for g in graphs}
    if len(pdfs) != 1:
        raise ChainError(f"numerator graphs disagree on the number of pdfs: {sorted(pdfs)}")
    s_max = max(g.num_states for g in graphs)
    a_max = max(max(g.num_arcs for g in graphs), 1)

    def pad(a: np.ndarray, n: int) -> np.ndarray:
        return np.concatenate([a, np.zeros(n - a.shape[0], a.dtype)])

    return GraphArrays(
        jnp.asarray(np.stack([pad(g.src, a_max) for g in graphs]), jnp.int32),
        jnp.asarray(np.stack([pad(g.dst, a_max) for g in graphs]), jnp.int32),
        jnp.asarray(np.stack([pad(g.pdf, a_max) for g in graphs]), jnp.int32),
        jnp.asarray(np.stack([pad(g.prob, a_max) for g in graphs]), dtype),
        jnp.asarray(np.stack([pad(g.initial, s_max) for g in graphs]), dtype),
        jnp.asarray(np.stack([pad(g.final, s_max) for g in graphs]), dtype),
    )


def _one_sequence(
    g: GraphArrays, y: jax.Array, length: jax.Array, leaky: float, clamp: float | None
) -> tuple[jax.Array, jax.Array]:
    """(log-probability, occupation [T, P]) of one sequence; frames `t >= length` are ignored."""
    num_frames, num_pdfs = y.shape
    num_states = g.initial.shape[0]
    if clamp is not None:  # Kaldi's denominator exponentiates min(max(y, -30), 30)
        y = jnp.clip(y, -clamp, clamp)
    top = jax.lax.stop_gradient(jnp.max(y, axis=1))  # per-frame shift: exp never overflows
    ts = jnp.arange(num_frames)

    def leak(a: jax.Array) -> jax.Array:
        return a + leaky * a.sum() * g.initial if leaky else a

    a0 = leak(g.initial)
    c0 = a0.sum()

    def forward(carry: tuple[jax.Array, jax.Array], t: jax.Array) -> tuple[tuple[jax.Array, jax.Array], tuple]:
        v, logz = carry
        e = jnp.exp(y[t] - top[t])
        u = jax.ops.segment_sum(v[g.src] * g.prob * e[g.pdf], g.dst, num_segments=num_states)
        u = leak(u)
        c = u.sum()
        live = t < length
        v_next = jnp.where(live, u / c, v)
        logz_next = jnp.where(live, logz + jnp.log(c) + top[t], logz)
        return (v_next, logz_next), (v, jnp.where(live, c, 1.0))

    (v_end, logz), (vs, cs) = jax.lax.scan(forward, (a0 / c0, jnp.log(c0)), ts)
    fin = (v_end * g.final).sum()
    logz = logz + jnp.log(fin)

    def backward(beta: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array]:
        # beta is normalised so that v_{t+1} . beta = 1; betau does the same for the pre-leak vector
        e = jnp.exp(y[t] - top[t])
        betau = (beta + leaky * (g.initial @ beta)) / cs[t] if leaky else beta / cs[t]
        through = g.prob * e[g.pdf] * betau[g.dst]
        gamma = vs[t][g.src] * through
        occ = jax.ops.segment_sum(gamma, g.pdf, num_segments=num_pdfs)
        beta_t = jax.ops.segment_sum(through, g.src, num_segments=num_states)
        live = t < length
        return jnp.where(live, beta_t, beta), jnp.where(live, occ, 0.0)

    _, occs = jax.lax.scan(backward, g.final / fin, ts, reverse=True)
    return logz, occs


def forward_backward(
    graph: GraphArrays,
    y: jax.Array,
    lengths: jax.Array,
    *,
    leaky: float = 0.0,
    clamp: float | None = None,
    shared: bool = True,
) -> tuple[jax.Array, jax.Array]:
    """`(logprob [B], occupation [B, T, P])` of `y` `[B, T, P]` on `graph`: one graph for every sequence
    (`shared`, the denominator) or a stack with a leading axis B (the numerators). `leaky` is the leaky-HMM
    coefficient (0: none), `clamp` limits `y` to `[-clamp, clamp]` first (Kaldi's denominator: 30)."""
    if not 0.0 <= leaky < 1.0:
        raise ChainError(f"leaky HMM coefficient {leaky} is not in [0, 1)")
    y = jax.lax.stop_gradient(y)

    def one(g: GraphArrays, ys: jax.Array, n: jax.Array) -> tuple[jax.Array, jax.Array]:
        return _one_sequence(g, ys, n, leaky, clamp)

    return jax.vmap(one, in_axes=(None if shared else 0, 0, 0))(graph, y, lengths)
