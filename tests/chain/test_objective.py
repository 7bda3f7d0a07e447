"""The chain forward-backward and objective against independent references: brute-force path enumeration,
`jax.grad` of a plain log-space forward algorithm, and the identities Kaldi's derivation rests on."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from symnet.chain import (
    ChainOptions,
    chain_objective,
    denominator_graph,
    forward_backward,
    fst_from_arcs,
    graph_arrays,
    numerator_graph,
    stack_graphs,
)
from symnet.errors import ChainError


@pytest.fixture(autouse=True)
def float64():
    """These tests compare in float64 (the references are exact to 1e-12); other tests' precision is untouched."""
    with jax.enable_x64(True):
        yield


P = 3
# a small cyclic graph: 3 states, 6 arcs (src, dst, pdf, prob)
ARCS = [(0, 0, 0, 0.5), (0, 1, 1, 0.5), (1, 1, 1, 0.3), (1, 2, 2, 0.7), (2, 2, 2, 0.6), (2, 0, 0, 0.4)]


def small_graph(final=None):
    src, dst, pdf, prob = zip(*ARCS, strict=True)
    return fst_from_arcs(src, dst, pdf, prob, num_states=3, start=0, final=final, log=False)


def brute_force(graph, y, leaky):
    """Sum over every path explicitly: start state, at each step the leak choice (stay, or jump to j with
    leaky * initial[j]) and an arc, then a last leak choice and the final probability."""
    states = range(graph.num_states)
    initial, final, prob = (np.asarray(a, np.float64) for a in (graph.initial, graph.final, graph.prob))
    total = 0.0

    def leak_choices(s):
        yield s, 1.0
        if leaky:
            for j in states:
                yield j, leaky * initial[j]

    def walk(s, t, p):
        nonlocal total
        for s2, w in leak_choices(s):
            if t == len(y):
                total += p * w * final[s2]
                continue
            for a in range(graph.num_arcs):
                if graph.src[a] == s2:
                    walk(graph.dst[a], t + 1, p * w * prob[a] * np.exp(y[t][graph.pdf[a]]))

    for s in states:
        if initial[s]:
            walk(s, 0, initial[s])
    return np.log(total)


def log_forward(graph, y, leaky):
    """A plain log-space forward algorithm, frame by frame (the reference for jax.grad)."""
    src, dst, pdf = (jnp.asarray(a) for a in (graph.src, graph.dst, graph.pdf))
    # log(0) as -1e30: finite, so that jax.grad of logsumexp never meets a row of -inf
    logp = jnp.log(jnp.asarray(graph.prob, y.dtype))
    init = jnp.maximum(jnp.log(jnp.asarray(graph.initial, y.dtype)), -1e30)

    def leak(alpha):
        if not leaky:
            return alpha
        return jnp.logaddexp(alpha, np.log(leaky) + jax.nn.logsumexp(alpha) + init)

    alpha = leak(init)
    for t in range(y.shape[0]):
        scores = alpha[src] + logp + y[t][pdf]
        alpha = jnp.stack([jax.nn.logsumexp(jnp.where(dst == j, scores, -1e30)) for j in range(graph.num_states)])
        alpha = leak(alpha)
    return jax.nn.logsumexp(alpha + jnp.maximum(jnp.log(jnp.asarray(graph.final, y.dtype)), -1e30))


@pytest.fixture
def y():
    return np.random.default_rng(0).normal(size=(2, 5, P))


@pytest.mark.parametrize("leaky", [0.0, 0.1])
def test_denominator_logprob_equals_brute_force_enumeration(y, leaky):
    den = denominator_graph(small_graph(), P)
    logprob, _ = forward_backward(graph_arrays(den, jnp.float64), jnp.asarray(y), jnp.array([5, 5]), leaky=leaky)
    for b in range(2):
        assert float(logprob[b]) == pytest.approx(brute_force(den, y[b], leaky), rel=1e-12)


def test_numerator_with_final_weights_equals_brute_force(y):
    num = numerator_graph(small_graph(final=[0.0, 0.2, 0.9]), P)
    g = stack_graphs([num, num], jnp.float64)
    logprob, _ = forward_backward(g, jnp.asarray(y), jnp.array([5, 3]), numerator=True)
    assert float(logprob[0]) == pytest.approx(brute_force(num, y[0], 0.0), rel=1e-12)
    assert float(logprob[1]) == pytest.approx(brute_force(num, y[1, :3], 0.0), rel=1e-12)


@pytest.mark.parametrize("leaky", [0.0, 0.1])
def test_occupation_is_jax_grad_of_a_plain_log_space_forward(y, leaky):
    den = denominator_graph(small_graph(), P)
    _, occ = forward_backward(graph_arrays(den, jnp.float64), jnp.asarray(y), jnp.array([5, 5]), leaky=leaky)
    for b in range(2):
        expected = jax.grad(lambda v: log_forward(den, v, leaky))(jnp.asarray(y[b]))
        np.testing.assert_allclose(occ[b], expected, rtol=1e-10, atol=1e-12)
        # occupations sum to one per frame (a probability over the frame's arcs)
        np.testing.assert_allclose(occ[b].sum(-1), 1.0, rtol=1e-12)


def test_kaldi_initial_probs_are_the_average_of_100_propagations():
    fst = small_graph(final=[1.0, 0.0, 0.0])  # probabilities: state 0 final with probability 1
    den = denominator_graph(fst, P)
    w = np.zeros((3, 3))
    for s, d, _, p in ARCS:
        w[s, d] += p
    norm = w / (w.sum(1) + np.array([1.0, 0.0, 0.0]))[:, None]  # each state's arcs + final sum to 1
    cur, avg = np.eye(3)[0], np.zeros(3)
    for _ in range(100):
        avg += cur / 100
        cur = cur @ norm
        cur /= cur.sum()
    np.testing.assert_allclose(den.initial, avg, rtol=1e-6)


def objective_inputs(y, leaky_den=True):
    den = denominator_graph(small_graph(), P)
    num_a = numerator_graph(small_graph(final=[1.0, 0.0, 0.0]), P)
    num_b = numerator_graph(fst_from_arcs([0, 1, 1], [1, 1, 2], [1, 2, 0], [0.3, 0.1, 0.5], num_states=3), P)
    return den, [num_a, num_b]


def test_objective_value_and_gradient_against_references(y):
    den, nums = objective_inputs(y)
    options = ChainOptions(leaky_hmm_coefficient=0.1, l2_regularize=0.01, out_of_range_regularize=0.0)
    weights = jnp.array([1.0, 0.5])
    lengths = jnp.array([5, 4])
    dg, ng = graph_arrays(den, jnp.float64), stack_graphs(nums, jnp.float64)

    def total(v):
        return chain_objective(v, dg, ng, lengths, weights, options).total

    r = chain_objective(jnp.asarray(y), dg, ng, lengths, weights, options)
    ref_objf = sum(
        float(weights[b]) * (brute_force(nums[b], y[b, :n], 0.0) - brute_force(den, y[b, :n], 0.1))
        for b, n in enumerate([5, 4])
    )
    assert float(r.objf) == pytest.approx(ref_objf, rel=1e-10)
    ref_l2 = -0.5 * 0.01 * (np.sum(y[0] ** 2) + 0.5 * np.sum(y[1, :4] ** 2))
    assert float(r.l2_term) == pytest.approx(ref_l2, rel=1e-12)
    assert float(r.weight) == pytest.approx(5 + 0.5 * 4)

    grad = jax.grad(total)(jnp.asarray(y))
    for b, n in enumerate([5, 4]):
        w = float(weights[b])
        ref = jax.grad(lambda v, w=w, b=b: w * (log_forward(nums[b], v, 0.0) - log_forward(den, v, 0.1)))(
            jnp.asarray(y[b, :n])
        )
        np.testing.assert_allclose(grad[b, :n], ref - 0.01 * w * y[b, :n], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(grad[b, n:], 0.0)
    # the derivative is numerator occupation minus denominator occupation (times the weight)
    _, den_occ = forward_backward(dg, jnp.asarray(y), lengths, leaky=0.1)
    _, num_occ = forward_backward(ng, jnp.asarray(y), lengths, numerator=True)
    np.testing.assert_allclose(
        grad + 0.01 * weights[:, None, None] * jnp.asarray(y) * (np.arange(5)[None, :, None] < lengths[:, None, None]),
        weights[:, None, None] * (num_occ - den_occ),
        atol=1e-12,
    )
    np.testing.assert_allclose(r.num_post, weights[:, None, None] * num_occ, atol=1e-15)


def test_same_graph_as_numerator_and_denominator_gives_zero(y):
    den = denominator_graph(small_graph(), P)
    # the numerator: the same arcs, starting from the denominator's initial probabilities, all states final
    num = numerator_graph(small_graph(), P)
    num = type(num)(**{**num.__dict__, "log_initial": den.log_initial})
    dg, ng = graph_arrays(den, jnp.float64), stack_graphs([num, num], jnp.float64)
    # a leaky coefficient Kaldi allows but too small to matter at this precision
    r = chain_objective(jnp.asarray(y), dg, ng, options=ChainOptions(leaky_hmm_coefficient=1e-15))
    assert abs(float(r.objf)) < 1e-12
    np.testing.assert_allclose(jax.grad(lambda v: chain_objective(v, dg, ng).objf)(jnp.asarray(y)), 0.0, atol=1e-4)


def test_padding_does_not_change_a_sequence(y):
    den, nums = objective_inputs(y)
    dg = graph_arrays(den, jnp.float64)
    first = chain_objective(jnp.asarray(y[:1]), dg, stack_graphs(nums[:1], jnp.float64))
    second = chain_objective(jnp.asarray(y[1:, :4]), dg, stack_graphs(nums[1:], jnp.float64))
    # the second sequence padded with a junk frame, in a batch whose other numerator graph is larger
    padded = y.copy()
    padded[1, 4] = 7.0
    both = chain_objective(jnp.asarray(padded), dg, stack_graphs(nums, jnp.float64), lengths=jnp.array([5, 4]))
    assert float(both.objf) == pytest.approx(float(first.objf) + float(second.objf), rel=1e-12)
    np.testing.assert_allclose(both.num_post[1, :4], second.num_post[0], atol=1e-14)
    np.testing.assert_allclose(both.num_post[1, 4:], 0.0)
    grad = jax.grad(lambda v: chain_objective(v, dg, stack_graphs(nums, jnp.float64), jnp.array([5, 4])).objf)
    np.testing.assert_allclose(grad(jnp.asarray(padded))[1, 4], 0.0)


def test_impossible_numerator_counts_as_kaldis_default():
    den = denominator_graph(small_graph(), P)
    # a numerator that needs pdf 2 at the first frame, with a -inf output there: no path
    num = numerator_graph(fst_from_arcs([0, 1], [1, 2], [2, 0], [0.0, 0.0], num_states=3), P)
    y = np.zeros((1, 2, P))
    y[0, 0, 2] = -np.inf
    r = chain_objective(jnp.asarray(y), graph_arrays(den, jnp.float64), stack_graphs([num], jnp.float64))
    assert float(r.objf) == -10.0 * 2


def test_options_kaldi_cannot_take_are_errors():
    with pytest.raises(ChainError, match="leaky_hmm_coefficient 0"):
        ChainOptions(leaky_hmm_coefficient=0.0)
    with pytest.raises(ChainError, match="lwf_scale"):
        ChainOptions(lwf_scale=0.1)
    with pytest.raises(ChainError, match="l2_regularize -1"):
        ChainOptions(l2_regularize=-1)
    den = denominator_graph(small_graph(), P)
    with pytest.raises(ChainError, match="pdf 2, the outputs only 2"):
        chain_objective(jnp.zeros((1, 3, 2)), graph_arrays(den), stack_graphs([numerator_graph(small_graph(), P)]))


def test_graphs_as_arguments_of_a_jitted_function_give_the_same_objective(y):
    """The denominator's arcs are sorted on the host when its graph is a constant of the traced program, and by the
    program itself when the graph is one of its arguments: the same value and gradient either way."""
    den, nums = objective_inputs(y)
    dg, ng = graph_arrays(den, jnp.float64), stack_graphs(nums, jnp.float64)
    options = ChainOptions(leaky_hmm_coefficient=0.1)

    def total(v, d, n):
        return chain_objective(v, d, n, options=options).total

    closed = jax.jit(jax.value_and_grad(lambda v: total(v, dg, ng)))(jnp.asarray(y))
    passed = jax.jit(jax.value_and_grad(total))(jnp.asarray(y), dg, ng)
    np.testing.assert_allclose(float(passed[0]), float(closed[0]), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(passed[1]), np.asarray(closed[1]), rtol=1e-10, atol=1e-14)
