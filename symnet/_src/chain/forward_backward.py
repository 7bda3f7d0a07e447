"""The chain forward-backward: total log-probability of a graph's paths and pdf occupations, in one XLA program.

For a sequence of `T` frames of network outputs `y[t, pdf]` (pseudo log-likelihoods), the
probability of a path is the product of its arcs' `prob * exp(y[t, pdf])`, times the initial
probability of its first state and the final probability of its last. Two algorithms, Kaldi's two:

- **the denominator** (Kaldi's DenominatorComputation): one graph shared by every sequence, in
  probability space. With the leaky HMM, after every frame (and before the first) a fraction `leaky`
  of the total probability mass is added, spread over the states in proportion to the initial
  probabilities: `alpha' = alpha + leaky * sum(alpha) * initial`. Kaldi scales each frame by an
  arbitrary factor for numerics only; here each frame's vector is normalised to sum to 1 and the log
  of the factor accumulated, so the result is the same quantity. Outputs are clamped first (Kaldi: to
  [-30, 30]), so `exp` of a frame's outputs spans at most 60 nats and cannot underflow.
- **the numerators** (Kaldi's NumeratorComputation): one graph per sequence, in log space, as Kaldi
  computes them: a numerator's weights come from `nnet3-chain-get-egs`'s normalization FST and reach
  tens of nats on one arc, and its outputs are not clamped, so probability space would underflow
  where Kaldi's log space does not. Each frame's log-alphas are shifted by their maximum and the
  shifts summed once at the end (float32 keeps its relative precision at any magnitude).

Both run as `jax.lax.scan` over frames (forward, then backward), over all sequences at once with
per-sequence lengths (frames at or past a sequence's length change nothing): the denominator with
sequences as the minor axis of its state vectors, the numerators `vmap`-ed; memory is the per-frame
state vectors, linear in frames. The result is not differentiated through: the
derivative of the log-probability with respect to `y` is the occupation it returns, used by the
custom VJP in `symnet._src.chain.objective`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..base.errors import ChainError
from .graph import ChainGraph

__all__ = ["forward_backward", "graph_arrays", "GraphArrays", "stack_graphs"]


class GraphArrays(NamedTuple):
    """A `ChainGraph` (or a padded stack of them, with a leading sequence axis) as JAX arrays: arcs and
    log-probabilities (-inf: none)."""

    src: jax.Array
    dst: jax.Array
    pdf: jax.Array
    log_prob: jax.Array
    log_initial: jax.Array
    log_final: jax.Array


def graph_arrays(graph: ChainGraph, dtype: jnp.dtype = jnp.float32) -> GraphArrays:
    """One graph's arrays, shared by every sequence (the denominator)."""
    return GraphArrays(
        jnp.asarray(graph.src, jnp.int32),
        jnp.asarray(graph.dst, jnp.int32),
        jnp.asarray(graph.pdf, jnp.int32),
        jnp.asarray(graph.log_prob, dtype),
        jnp.asarray(graph.log_initial, dtype),
        jnp.asarray(graph.log_final, dtype),
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

    def pad(a: np.ndarray, n: int, value: float = 0) -> np.ndarray:
        return np.concatenate([a, np.full(n - a.shape[0], value, a.dtype)])

    def stacked(key: str, n: int, value: float = 0) -> np.ndarray:
        return np.stack([pad(getattr(g, key), n, value) for g in graphs])

    return GraphArrays(
        jnp.asarray(stacked("src", a_max), jnp.int32),
        jnp.asarray(stacked("dst", a_max), jnp.int32),
        jnp.asarray(stacked("pdf", a_max), jnp.int32),
        jnp.asarray(stacked("log_prob", a_max, -np.inf), dtype),
        jnp.asarray(stacked("log_initial", s_max, -np.inf), dtype),
        jnp.asarray(stacked("log_final", s_max, -np.inf), dtype),
    )


def _denominator(
    g: GraphArrays, y: jax.Array, lengths: jax.Array, leaky: float, clamp: float | None
) -> tuple[jax.Array, jax.Array]:
    """(log-probability [B], occupation [B, T, P]) of every sequence on the shared graph, in scaled probability
    space; frames `t >= lengths[b]` are ignored. State vectors are `[states, B]`, sequences the minor axis (as
    Kaldi lays them out), so each arc's work is a contiguous row; arcs are sorted by the state or pdf they are
    summed into, once per call, for the sorted segment sums of the forward pass (by destination), the backward
    pass (by source) and the occupations (by pdf)."""
    batch, num_frames, num_pdfs = y.shape
    num_states = g.log_initial.shape[0]
    initial, final = jnp.exp(g.log_initial), jnp.exp(g.log_final)
    if clamp is not None:  # Kaldi's denominator exponentiates min(max(y, -30), 30)
        y = jnp.clip(y, -clamp, clamp)
    top = jax.lax.stop_gradient(jnp.max(y, axis=2))  # [B, T]: per-frame shift, so exp never overflows
    e = jnp.exp(y - top[:, :, None]).transpose(1, 2, 0)  # [T, P, B]
    ts = jnp.arange(num_frames)

    def arcs(key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        # a graph known when the program is traced (the usual case) is sorted here, not by XLA's constant folding
        traced = isinstance(key, jax.core.Tracer)
        order = jnp.argsort(key, stable=True) if traced else np.argsort(np.asarray(key), kind="stable")
        return g.src[order], g.dst[order], g.pdf[order], jnp.exp(g.log_prob[order])[:, None]

    def leak(a: jax.Array) -> jax.Array:
        return a + leaky * a.sum(0) * initial[:, None] if leaky else a

    a0 = leak(jnp.broadcast_to(initial[:, None], (num_states, batch)))
    c0 = a0.sum(0)
    src, dst, pdf, prob = arcs(g.dst)

    def forward(carry: tuple[jax.Array, jax.Array], t: jax.Array) -> tuple[tuple[jax.Array, jax.Array], tuple]:
        v, logz = carry
        u = jax.ops.segment_sum(v[src] * prob * e[t][pdf], dst, num_segments=num_states, indices_are_sorted=True)
        u = leak(u)
        c = u.sum(0)
        live = t < lengths
        v_next = jnp.where(live, u / c, v)
        logz_next = jnp.where(live, logz + jnp.log(c) + top[:, t], logz)
        return (v_next, logz_next), (v, jnp.where(live, c, 1.0))

    (v_end, logz), (vs, cs) = jax.lax.scan(forward, (a0 / c0, jnp.log(c0)), ts)
    fin = (v_end * final[:, None]).sum(0)
    logz = logz + jnp.log(fin)
    b_src, b_dst, b_pdf, b_prob = arcs(g.src)
    p_src, p_dst, p_pdf, p_prob = arcs(g.pdf)

    def backward(beta: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array]:
        # beta is normalised so that v_{t+1} . beta = 1; betau does the same for the pre-leak vector
        betau = (beta + leaky * (initial @ beta)) / cs[t] if leaky else beta / cs[t]
        through = b_prob * e[t][b_pdf] * betau[b_dst]
        beta_t = jax.ops.segment_sum(through, b_src, num_segments=num_states, indices_are_sorted=True)
        gamma = vs[t][p_src] * p_prob * e[t][p_pdf] * betau[p_dst]
        occ = jax.ops.segment_sum(gamma, p_pdf, num_segments=num_pdfs, indices_are_sorted=True)
        live = t < lengths
        return jnp.where(live, beta_t, beta), jnp.where(live, occ, 0.0)

    _, occs = jax.lax.scan(backward, final[:, None] / fin, ts, reverse=True)
    return logz, occs.transpose(2, 0, 1)


def _finite_or_zero(x: jax.Array) -> jax.Array:
    return jnp.where(jnp.isfinite(x), x, 0.0)


def _numerator(g: GraphArrays, y: jax.Array, length: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(log-probability, occupation [T, P]) of one sequence in log space; frames `t >= length` are ignored."""
    num_frames, num_pdfs = y.shape
    num_states = g.log_initial.shape[0]
    ts = jnp.arange(num_frames)

    def logsumexp_into(x: jax.Array, into: jax.Array) -> jax.Array:
        """Per state, the log of the summed exp of the arc scores `x` whose state (in `into`) it is."""
        top = _finite_or_zero(jax.ops.segment_max(x, into, num_segments=num_states))
        return jnp.log(jax.ops.segment_sum(jnp.exp(x - top[into]), into, num_segments=num_states)) + top

    a0 = g.log_initial
    shift0 = _finite_or_zero(jnp.max(a0))

    def forward(alpha: jax.Array, t: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        # alpha is shifted so that its largest entry is 0; the shifts add up to the true scale
        u = logsumexp_into(alpha[g.src] + g.log_prob + y[t, g.pdf], g.dst)
        shift = _finite_or_zero(jnp.max(u))
        live = t < length
        return jnp.where(live, u - shift, alpha), (alpha, jnp.where(live, shift, 0.0))

    alpha_end, (alphas, shifts) = jax.lax.scan(forward, a0 - shift0, ts)
    log_fin = jax.nn.logsumexp(alpha_end + g.log_final)
    logz = shift0 + shifts.sum() + log_fin

    def backward(beta: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array]:
        # beta is shifted so that logsumexp(alpha_{t+1} + beta) = 0, so alpha_t + through is the arc's log posterior
        through = g.log_prob + y[t, g.pdf] + beta[g.dst] - shifts[t]
        occ = jax.ops.segment_sum(jnp.exp(alphas[t][g.src] + through), g.pdf, num_segments=num_pdfs)
        beta_t = logsumexp_into(through, g.src)
        live = t < length
        return jnp.where(live, beta_t, beta), jnp.where(live, occ, 0.0)

    _, occs = jax.lax.scan(backward, g.log_final - log_fin, ts, reverse=True)
    return logz, occs


def forward_backward(
    graph: GraphArrays,
    y: jax.Array,
    lengths: jax.Array,
    *,
    leaky: float = 0.0,
    clamp: float | None = None,
    numerator: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """`(logprob [B], occupation [B, T, P])` of `y` `[B, T, P]` on `graph`: one graph for every sequence (the
    denominator, in scaled probability space with leaky-HMM coefficient `leaky` (0: none) and `y` clamped to
    `[-clamp, clamp]` first; Kaldi's: 30), or with `numerator` a stack with a leading axis B (the numerators, in
    log space, as Kaldi computes them: neither leaky nor clamped)."""
    if not 0.0 <= leaky < 1.0:
        raise ChainError(f"leaky HMM coefficient {leaky} is not in [0, 1)")
    y = jax.lax.stop_gradient(y)
    if numerator:
        if leaky or clamp is not None:
            raise ChainError("numerators are computed as Kaldi does, without a leaky HMM or clamped outputs")
        return jax.vmap(_numerator)(graph, y, lengths)

    return _denominator(graph, y, lengths, leaky, clamp)
