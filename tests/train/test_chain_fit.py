"""The chain (LF-MMI) objective in fit: `symnet.train.Chain` against `chain_objective` called directly on graphs
built by hand, symnet's alignment numerator against brute-force enumeration of the pdf sequences it accepts, the
pdf-bigram denominator against bigram counts, a short fit that raises the frame accuracy, and refusals."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from symnet import Append, Input, Network, Normal, Offset, ReLU, ShapeError, Weight, Zeros
from symnet._src.train.objectives import get_objective
from symnet.chain import (
    ChainOptions,
    alignment_numerator,
    chain_objective,
    denominator_from_alignments,
    denominator_graph,
    fst_from_arcs,
    graph_arrays,
    numerator_graph,
    stack_graphs,
)
from symnet.datasets import HmmTask
from symnet.errors import ChainError
from symnet.train import Chain, TrainingError, fit

P = 4  # pdfs of the small cases


def small_den():
    """A 3-state denominator over 4 pdfs, arcs written out by hand."""
    fst = fst_from_arcs(
        [0, 0, 1, 1, 2, 2, 1],
        [1, 2, 1, 2, 0, 2, 0],
        [0, 1, 2, 3, 0, 1, 3],
        [0.6, 0.4, 0.5, 0.2, 0.7, 0.3, 0.3],
        log=False,
    )
    return denominator_graph(fst, P)


def hand_numerator(alignment, k, d):
    """The documented numerator written independently: state j -> j + 1 for each distinct pdf of
    alignment[jk - d .. jk + d], start 0, final the last state."""
    n = len(alignment)
    src, dst, pdf = [], [], []
    frames = list(range(0, n, k))
    for j, t in enumerate(frames):
        for p in sorted({alignment[i] for i in range(n) if abs(i - t) <= d}):
            src.append(j)
            dst.append(j + 1)
            pdf.append(p)
    final = np.full(len(frames) + 1, np.inf)
    final[-1] = 0.0
    return numerator_graph(fst_from_arcs(src, dst, pdf, np.zeros(len(src)), final=final), P)


ALIGNMENTS = [[0, 0, 1, 1, 2, 3, 3, 3, 1], [2, 2, 3, 0, 0, 1], [1, 3, 3, 2, 0, 0, 0, 2, 2]]


def chunks_of(alignments, width):
    targets = np.zeros((len(alignments), width), np.int64)
    weights = np.zeros((len(alignments), width), np.float32)
    for i, a in enumerate(alignments):
        targets[i, : len(a)], weights[i, : len(a)] = a, 1.0
    return targets, weights


@pytest.mark.parametrize(
    "k,d", [(1, 0), pytest.param(3, 0, marks=pytest.mark.slow), pytest.param(2, 1, marks=pytest.mark.slow), (3, 2)]
)
def test_loss_and_gradient_are_chain_objectives_on_hand_built_graphs(k, d):
    width = 9
    targets, weights = chunks_of(ALIGNMENTS, width)
    options = ChainOptions(l2_regularize=0.01, leaky_hmm_coefficient=0.1)
    objective = Chain(den=small_den(), options=options, tolerance=d)
    sup = {name: jnp.asarray(a) for name, a in objective.supervision(targets, weights, k).items()}
    t_out = -(-width // k)
    y = jnp.asarray(np.random.default_rng(k + d).normal(size=(3, t_out, P)), jnp.float32)
    w_out = jnp.asarray(weights[:, ::k])
    loss, grad = jax.value_and_grad(lambda v: objective.loss(v, w_out, sup)[0])(y)
    _, stats = objective.loss(y, w_out, sup)

    lengths = jnp.asarray([-(-len(a) // k) for a in ALIGNMENTS])
    num = stack_graphs([hand_numerator(a, k, d) for a in ALIGNMENTS])
    den = graph_arrays(small_den())

    def direct(v):
        r = chain_objective(v, den, num, lengths, options=options)
        return -(r.objf + r.l2_term) / r.weight

    expected, expected_grad = jax.value_and_grad(direct)(y)
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)
    np.testing.assert_allclose(np.asarray(grad), np.asarray(expected_grad), atol=1e-6)
    # the gradient is (den - num occupation) / frames (and l2) on real frames, 0 on padding
    assert not np.asarray(grad)[0, lengths[0] :].any() or lengths[0] == t_out
    # statistics: the frames whose argmax is the aligned pdf
    aligned = targets[:, ::k]
    mask = weights[:, ::k] > 0
    assert float(stats["count"]) == mask.sum()
    assert float(stats["correct"]) == ((np.asarray(y).argmax(-1) == aligned) & mask).sum()


def accepted(graph, length):
    """Every pdf sequence of `length` frames with a path of nonzero probability from an initial to a final state,
    by enumeration (sets of reachable states per prefix)."""
    out = []
    for seq in itertools.product(range(graph.num_pdfs), repeat=length):
        states = {s for s in range(graph.num_states) if graph.initial[s] > 0}
        for p in seq:
            states = {
                int(graph.dst[a])
                for a in range(graph.num_arcs)
                if graph.src[a] in states and graph.pdf[a] == p and graph.prob[a] > 0
            }
        if any(graph.final[s] > 0 for s in states):
            out.append(seq)
    return out


def test_tolerance_zero_numerator_is_the_alignment_alone():
    alignment = [2, 2, 0, 1, 1, 3, 0]
    for k in (1, 2, 3):
        graph = alignment_numerator(np.array(alignment), P, subsampling=k)
        frames = -(-len(alignment) // k)
        assert accepted(graph, frames) == [tuple(alignment[::k])]
        # and its log-probability is the sum of the aligned outputs
        y = np.random.default_rng(k).normal(size=(1, frames, P)).astype(np.float32)
        from symnet.chain import forward_backward

        logp, _ = forward_backward(stack_graphs([graph]), jnp.asarray(y), jnp.asarray([frames]), numerator=True)
        assert float(logp[0]) == pytest.approx(sum(y[0, j, alignment[j * k]] for j in range(frames)), rel=1e-5)


def test_tolerance_allows_the_pdfs_aligned_nearby():
    alignment = [0, 0, 1, 2, 2, 3]
    graph = alignment_numerator(np.array(alignment), P, subsampling=2, tolerance=1)
    # output frames at input frames 0, 2, 4: windows [0, 1], [1, 3], [3, 5]
    windows = [{0}, {0, 1, 2}, {2, 3}]
    assert set(accepted(graph, 3)) == set(itertools.product(*[sorted(w) for w in windows]))


def test_bigram_denominator_against_counts():
    alignments = [np.array([0, 0, 1, 1, 1, 2]), np.array([1, 2, 2, 0, 0])]
    for k in (1, 2):
        graph = denominator_from_alignments(alignments, 3, subsampling=k)
        counts: Counter = Counter()
        for a in alignments:
            for phase in range(k):
                s = list(a[phase::k])
                for prev, cur in zip(["start"] + s[:-1], s):
                    counts[prev, cur] += 1
        probs = {}
        for (prev, cur), c in counts.items():
            probs[prev, cur] = c / sum(v for (p2, _), v in counts.items() if p2 == prev)
        got = {}
        for s, d, p, pr in zip(graph.src, graph.dst, graph.pdf, graph.prob):
            assert d == p + 1  # the state after pdf p
            got["start" if s == 0 else int(s) - 1, int(p)] = float(pr)
        assert got.keys() == probs.keys()
        for key, value in probs.items():
            assert got[key] == pytest.approx(value, rel=1e-6)
        assert (graph.final == 1).all()


def test_refusals():
    with pytest.raises(TrainingError, match="xent_regularize=0.1 with xent_output=None: .* give both or neither"):
        Chain(den=small_den(), options=ChainOptions(xent_regularize=0.1))
    with pytest.raises(TrainingError, match="xent_regularize=0.0 with xent_output='output-xent'"):
        Chain(den=small_den(), xent_output="output-xent")
    with pytest.raises(TrainingError, match="tolerance must be an integer >= 0"):
        Chain(tolerance=-1)
    with pytest.raises(TrainingError, match="has no denominator graph: pass Chain.den="):
        targets, weights = chunks_of(ALIGNMENTS, 9)
        Chain().loss(jnp.zeros((3, 9, P)), jnp.asarray(weights), Chain().supervision(targets, weights))
    weights = np.ones((1, 4), np.float32)
    weights[0, 1] = 0
    with pytest.raises(TrainingError, match="weights must be 1 on a prefix"):
        Chain(den=small_den()).supervision(np.zeros((1, 4), np.int64), weights)
    with pytest.raises(ShapeError, match="has 4 pdfs, output 'output' dim 5"):
        Chain(den=small_den()).check(np.zeros((1, 4), np.int64), 5, "training data", "output")
    with pytest.raises(ShapeError, match="one integer pdf-id per frame"):
        Chain().check(np.zeros((1, 4, 2)), 5, "training data", "output")
    with pytest.raises(ChainError, match="pdf 4 is out of range for 4 pdfs"):
        alignment_numerator(np.array([0, 4]), P)
    assert isinstance(get_objective("chain"), Chain)


# -- fit on the built-in task --------------------------------------------------------------------------------

FEAT = 6


def affine(x, fan_in, fan_out, name):
    return x @ Weight(Normal((fan_in, fan_out), 1.0 / math.sqrt(fan_in)), name=f"{name}.w") + Weight(
        Zeros(fan_out), name=f"{name}.b"
    )


def tdnn(out_dim):
    """A small TDNN whose output is pdf pseudo log-likelihoods (no log-softmax), as chain models have."""
    x = Input("input", FEAT)
    h = ReLU(affine(Append(*[Offset(x, o) if o else x for o in (-2, -1, 0, 1, 2)]), 5 * FEAT, 24, "l1"))
    h = ReLU(affine(Append(Offset(h, -3), h, Offset(h, 3)), 72, 24, "l2"))
    return Network(affine(h, 24, out_dim, "out"), seed=0)


@pytest.fixture(scope="module")
def task():
    return HmmTask.create(
        seed=0, num_phones=5, successors=2, states_per_phone=2, feat_dim=FEAT, min_length=40, max_length=80
    )


def frame_accuracy(network, data, k):
    outputs = network.compute(list(data.features))
    right = sum(int((np.asarray(o)[::k].argmax(-1) == lab[::k]).sum()) for o, lab in zip(outputs, data.labels))
    return right / sum(len(lab[::k]) for lab in data.labels)


@pytest.mark.parametrize("k", [pytest.param(1, marks=pytest.mark.slow), 3])
def test_a_short_chain_fit_raises_the_frame_accuracy(task, k):
    train, valid = task.sample(40, seed=1), task.sample(12, seed=2)
    net = tdnn(task.num_states)
    before = frame_accuracy(net, valid, k)
    result = fit(
        net,
        train,
        optax.adam(1e-2),
        objective="chain",
        chunk=30,
        batch_size=16,
        epochs=6,
        progress=False,
        valid=valid,
        frame_subsampling_factor=k,
    )
    after = frame_accuracy(result.network, valid, k)
    assert after > before + 0.2 and after > 0.4, (before, after)
    history = result.history
    assert history[-1].train_loss < history[0].train_loss
    # fit's reported validation accuracy is the same frame accuracy, on the chunks
    assert history[-1].valid_accuracy == pytest.approx(after, abs=0.1)


def test_chain_fit_with_a_given_denominator_equals_the_derived_one(task):
    """`objective="chain"` makes the pdf bigram of the training alignments: the same run as passing it, or
    passing it as an Fst (a den.fst read by read_fst is one)."""
    train = task.sample(8, seed=1)
    k = 3
    den = denominator_from_alignments(list(train.labels), task.num_states, subsampling=k)
    common = dict(chunk=30, batch_size=8, epochs=1, progress=False, frame_subsampling_factor=k)
    # chunks of 30 frames: bigrams across chunk boundaries are not counted, so derive from the chunks' view
    by_name = fit(tdnn(task.num_states), train, optax.adam(1e-2), objective="chain", **common)
    given = fit(tdnn(task.num_states), train, optax.adam(1e-2), objective=Chain(den=by_name_den(train, k)), **common)
    assert by_name.history[0].train_loss == pytest.approx(given.history[0].train_loss, rel=1e-6)
    fst = fst_from_arcs(den.src, den.dst, den.pdf, den.prob, num_states=den.num_states, log=False)
    as_fst = fit(tdnn(task.num_states), train, optax.adam(1e-2), objective=Chain(den=fst), **common)
    as_graph = fit(tdnn(task.num_states), train, optax.adam(1e-2), objective=Chain(den=den), **common)
    assert as_fst.history[0].train_loss == pytest.approx(as_graph.history[0].train_loss, rel=1e-6)
    with pytest.raises(ShapeError, match="denominator graph has 3 pdfs"):
        fit(tdnn(task.num_states), train, optax.adam(1e-2), objective=Chain(den=small_den_of(3)), **common)


def by_name_den(train, k):
    from symnet.train import make_chunks

    chunks = make_chunks(train.features, train.labels, chunk=30, left=0, right=0)
    alignments = [t[w > 0] for t, w in zip(chunks.targets, chunks.weights)]
    return denominator_from_alignments(alignments, 10, subsampling=k)


def small_den_of(p):
    return denominator_graph(fst_from_arcs([0, 0], [0, 0], [0, p - 1], [0.5, 0.5], log=False), p)


# -- the cross-entropy output (Kaldi's output-xent) ---------------------------------------------------------


def two_headed(out_dim):
    """A TDNN with Kaldi's two chain outputs: `output` (no log-softmax) and `output-xent` (log-softmax), on one
    shared hidden layer."""
    from symnet import LogSoftmax

    x = Input("input", FEAT)
    h = ReLU(affine(Append(*[Offset(x, o) if o else x for o in (-2, -1, 0, 1, 2)]), 5 * FEAT, 16, "l1"))
    return Network(
        {"output": affine(h, 16, out_dim, "out"), "output-xent": LogSoftmax(affine(h, 16, out_dim, "xent"))}, seed=0
    )


def test_xent_regularized_step_equals_jax_grad_of_kaldis_total(task):
    """One training step's gradient, through the Tape's one backward walk over both outputs, equals jax.grad of
    Kaldi's total objective (chain + l2 + xent_regularize * xent) computed with chain_objective on the compiled
    computation's outputs; output-xent's gradient is xent_regularize * numerator posteriors / frames."""
    from symnet._src.train import trainer as training
    from symnet.train import make_chunks

    data = task.sample(3, seed=1)
    net = two_headed(task.num_states)
    k, width = 3, 30
    chunks = make_chunks(data.features, data.labels, chunk=width, left=2, right=2)
    den = denominator_from_alignments(list(data.labels), task.num_states, subsampling=k)
    options = ChainOptions(l2_regularize=0.01, xent_regularize=0.25)
    objective = Chain(den=den, options=options, xent_output="output-xent")
    trainer = training.Trainer(
        net,
        optax.sgd(1.0),
        batch_size=2,
        chunks=chunks,
        objective=objective,
        input="input",
        output="output",
        frame_subsampling_factor=k,
    )
    assert trainer.outputs == ("output", "output-xent")
    idx = np.arange(2)
    x, targets, weights = trainer.arrays(trainer.minibatch(0, chunks, idx))
    opt_state = optax.sgd(1.0).init(net.params)
    new, _, loss, stats, _, _, _ = trainer.step(net, opt_state, x, targets, weights)
    step_grads = {name: np.asarray(net.params[name] - new.params[name]) for name in net.params}

    sup = objective.supervision(chunks.targets[idx], chunks.weights[idx], k)
    num = stack_graphs(
        [
            alignment_numerator(a[w > 0], task.num_states, subsampling=k)
            for a, w in zip(chunks.targets[idx], chunks.weights[idx])
        ]
    )
    lengths = jnp.asarray((chunks.weights[idx][:, ::k] > 0).sum(1))
    computation = trainer.computation_for(width)

    def kaldi_total(params):
        values = computation(net.assign(params), {"input": x})
        y, xent = (jnp.swapaxes(values[n].reshape(-1, 2, task.num_states), 0, 1) for n in ("output", "output-xent"))
        r = chain_objective(y, graph_arrays(den), num, lengths, options=options, xent_output=xent)
        return -r.total / r.weight, -(r.objf + r.l2_term) / r.weight

    (total, chain_only), grads = jax.value_and_grad(kaldi_total, has_aux=True)(dict(net.params))
    assert float(loss) == pytest.approx(float(chain_only), rel=1e-5)  # the reported loss leaves xent out
    assert float(total) != pytest.approx(float(chain_only), rel=1e-3)  # ... which does count in the gradient
    for name, g in grads.items():
        np.testing.assert_allclose(step_grads[name], np.asarray(g), atol=2e-5, rtol=1e-4, err_msg=name)
    assert np.abs(step_grads["xent.w"]).max() > 1e-3  # output-xent is trained
    assert sup["alignment"].shape == (2, 10)


@pytest.mark.slow
def test_fit_with_xent_regularization_trains_both_outputs(task):
    train = task.sample(30, seed=1)
    net = two_headed(task.num_states)
    objective = Chain(xent_output="output-xent", options=ChainOptions(xent_regularize=0.1))
    result = fit(
        net,
        train,
        optax.adam(1e-2),
        objective=objective,
        chunk=30,
        batch_size=16,
        epochs=4,
        progress=False,
        frame_subsampling_factor=3,
    )

    def xent_accuracy(network):
        outputs = network.compute(list(train.features), output="output-xent")
        right = sum(int((np.asarray(o)[::3].argmax(-1) == lab[::3]).sum()) for o, lab in zip(outputs, train.labels))
        return right / sum(len(lab[::3]) for lab in train.labels)

    before, after = xent_accuracy(net), xent_accuracy(result.network)
    assert after > before + 0.15, (before, after)  # the xent head learnt the pdfs


def test_xent_output_must_exist_and_match_the_output(task):
    train = task.sample(4, seed=1)
    with pytest.raises(TrainingError, match="reads output 'output-xnet', which the network does not have"):
        fit(
            two_headed(task.num_states),
            train,
            optax.adam(1e-2),
            chunk=30,
            progress=False,
            objective=Chain(xent_output="output-xnet", options=ChainOptions(xent_regularize=0.1)),
        )
    x = Input("input", FEAT)
    wrong = Network({"output": affine(x, FEAT, task.num_states, "o"), "output-xent": affine(x, FEAT, 3, "x")}, seed=0)
    with pytest.raises(ShapeError, match="reads output 'output-xent' of dim 3 beside output 'output' of dim 10"):
        fit(
            wrong,
            train,
            optax.adam(1e-2),
            chunk=30,
            progress=False,
            objective=Chain(xent_output="output-xent", options=ChainOptions(xent_regularize=0.1)),
        )


# -- Kaldi's recipe: phone alignments, a topology, the phone-LM denominator ------------------------------------


def test_chain_with_a_topology_trains_on_phone_alignments(task):
    """Chain(topology=...) takes phone ids per frame, makes Kaldi's numerators (tolerance 5/5) and the phone-LM
    denominator from the training chunks, and raises the phone accuracy of the output's argmax pdf."""
    from symnet.chain import Topology

    train = task.phone_dataset(task.sample(40, seed=1))
    topology = Topology.chain(range(1, task.num_phones + 1))
    objective = Chain(topology=topology)
    net = tdnn(2 * task.num_phones)
    result = fit(
        net,
        train,
        optax.adam(3e-3),
        objective=objective,
        chunk=30,
        batch_size=16,
        epochs=6,
        progress=False,
        frame_subsampling_factor=3,
    )
    history = result.history
    # the numerators are weighted by the denominator (Kaldi's egs): the objective is <= 0, the loss >= 0
    assert all(h.train_loss > 0 for h in history)
    assert history[-1].train_loss < 0.5 * history[0].train_loss, [h.train_loss for h in history]
    assert history[-1].train_accuracy > history[0].train_accuracy + 0.1, [h.train_accuracy for h in history]
    assert "topology=" in objective.describe()


def test_chain_topology_refusals(task):
    from symnet.chain import Topology

    topology = Topology.chain([1, 2, 3])
    with pytest.raises(TrainingError, match="pdfs, left_tolerance apply to phone alignments"):
        Chain(pdfs={1: (0, 1)}, left_tolerance=2)
    with pytest.raises(TrainingError, match="with a topology give left_tolerance and right_tolerance"):
        Chain(topology=topology, tolerance=2)
    with pytest.raises(ShapeError, match="phone 4 has no HMM in the chain topology"):
        Chain(topology=topology).check(np.array([[1, 4]]), 6, "training data", "output")
    with pytest.raises(ShapeError, match="the chain topology has 6 pdfs, output 'output' dim 5"):
        Chain(topology=topology).check(np.array([[1, 2]]), 5, "training data", "output")
