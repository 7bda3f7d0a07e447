"""Sequence objectives in fit: CTC against a brute-force sum over all alignments (loss and gradient), its greedy
decode and edit distance against numpy, frame subsampling, the built-in task's phone transcripts, and a short
CTC fit that lowers the phone error rate."""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from symnet import Append, Input, LogSoftmax, Network, Normal, Offset, ReLU, ShapeError, Weight, Zeros
from symnet._src.train import trainer as training
from symnet._src.train.objectives import Linear, collapse, edit_distances, get_objective
from symnet.datasets import Dataset, HmmTask, phone_error_rate
from symnet.train import CTC, FitOptions, Objective, TrainingError, edit_distance, fit, greedy_decode, make_chunks

# -- brute force --------------------------------------------------------------------------------------------


def ctc_collapse(path, blank=0):
    out = [p for i, p in enumerate(path) if i == 0 or p != path[i - 1]]
    return [p for p in out if p != blank]


def alignments(frames, dim, labels, blank=0):
    """Every path of `frames` symbols of [0, dim) that CTC maps to `labels`."""
    return np.array(
        [p for p in itertools.product(range(dim), repeat=frames) if ctc_collapse(p, blank) == list(labels)],
        dtype=np.int64,
    ).reshape(-1, frames)


def brute_nll(logits, labels, blank=0):
    """-log sum over alignments of prod softmax(logits)[t, path_t] (numpy, float64)."""
    logits = np.asarray(logits, np.float64)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    paths = alignments(len(logits), logits.shape[-1], labels, blank)
    scores = logp[np.arange(len(logits)), paths].sum(-1)
    return -np.log(np.exp(scores).sum())


def brute_nll_jax(logits, paths):
    logp = jax.nn.log_softmax(logits)
    return -jax.nn.logsumexp(logp[jnp.arange(logits.shape[0]), paths].sum(-1))


CASES = [  # (frames, labels) with dim 3: repeats, a single label, as many labels as frames
    (4, [1, 2]),
    (5, [1, 1]),
    (3, [2]),
    (3, [1, 2, 1]),
    (5, [2, 1, 2]),
]


def batch(cases, dim=3, seed=0, blank=0):
    """A padded minibatch of the cases: output [B, T, dim], weights [B, T], supervision."""
    rng = np.random.default_rng(seed)
    width = max(t for t, _ in cases)
    longest = max(len(lab) for _, lab in cases)
    output = rng.standard_normal((len(cases), width, dim)).astype(np.float32)
    weights = np.zeros((len(cases), width), np.float32)
    labels = np.zeros((len(cases), longest), np.int32)
    paddings = np.ones((len(cases), longest), np.float32)
    for i, (t, lab) in enumerate(cases):
        weights[i, :t] = 1
        labels[i, : len(lab)], paddings[i, : len(lab)] = lab, 0
    return output, weights, {"labels": jnp.asarray(labels), "label_paddings": jnp.asarray(paddings)}


def test_ctc_loss_equals_the_sum_over_all_alignments():
    output, weights, sup = batch(CASES)
    loss, stats = jax.jit(CTC().loss)(jnp.asarray(output), jnp.asarray(weights), sup)
    expected = sum(brute_nll(output[i, :t], lab) for i, (t, lab) in enumerate(CASES))
    # the loss is per frame: the sum over sequences over all their frames
    np.testing.assert_allclose(float(loss) * weights.sum(), expected, rtol=1e-5)
    # each sequence alone: with the others' frames weighted 0 (left out), the loss is its own
    for i, (t, lab) in enumerate(CASES):
        alone = np.zeros_like(weights)
        alone[i] = weights[i]
        value = jax.jit(CTC().loss)(jnp.asarray(output), jnp.asarray(alone), sup)[0]
        np.testing.assert_allclose(float(value) * t, brute_nll(output[i, :t], lab), rtol=1e-5)
    assert float(stats["count"]) == sum(len(lab) for _, lab in CASES)


def test_ctc_gradient_equals_jax_grad_of_the_brute_force():
    output, weights, sup = batch(CASES, seed=1)
    _, _, delta, _ = jax.jit(CTC().value_and_grad)(jnp.asarray(output), jnp.asarray(weights), sup)
    total = weights.sum()
    for i, (t, lab) in enumerate(CASES):
        paths = jnp.asarray(alignments(t, 3, lab))
        expected = jax.grad(brute_nll_jax)(jnp.asarray(output[i, :t], jnp.float32), paths) / total
        np.testing.assert_allclose(np.asarray(delta[i, :t]), np.asarray(expected), atol=2e-6)
        assert not np.asarray(delta[i, t:]).any()  # padding frames get no gradient


def test_ctc_gradient_by_finite_differences():
    output, weights, sup = batch([(4, [1, 2])], seed=2)
    output = output.astype(np.float64)
    _, _, delta, _ = jax.jit(CTC().value_and_grad)(jnp.asarray(output, jnp.float32), jnp.asarray(weights), sup)
    eps = 1e-4
    for t, d in [(0, 0), (1, 1), (3, 2), (2, 0)]:
        up, down = output[0].copy(), output[0].copy()
        up[t, d] += eps
        down[t, d] -= eps
        numeric = (brute_nll(up, [1, 2]) - brute_nll(down, [1, 2])) / (2 * eps) / 4
        assert float(delta[0, t, d]) == pytest.approx(numeric, abs=1e-4)


def test_ctc_takes_log_softmax_outputs_and_logits_alike_and_another_blank():
    output, weights, sup = batch(CASES, seed=3)
    loss = jax.jit(CTC().loss)
    raw = loss(jnp.asarray(output), jnp.asarray(weights), sup)[0]
    normalised = loss(jax.nn.log_softmax(jnp.asarray(output)), jnp.asarray(weights), sup)[0]
    np.testing.assert_allclose(float(raw), float(normalised), rtol=1e-6)
    # blank 2: labels from {0, 1}
    cases = [(4, [0, 1]), (3, [1, 1])]
    output, weights, sup = batch(cases, seed=4)
    loss = jax.jit(CTC(blank=2).loss)(jnp.asarray(output), jnp.asarray(weights), sup)[0]
    expected = sum(brute_nll(output[i, :t], lab, blank=2) for i, (t, lab) in enumerate(cases))
    np.testing.assert_allclose(float(loss) * weights.sum(), expected, rtol=1e-5)


def test_a_sequence_that_cannot_be_aligned_is_left_out():
    # 2 frames cannot hold [1, 1] (it needs a blank between): the loss is the other sequence's alone
    output, weights, sup = batch([(2, [1, 1]), (4, [1, 2])], seed=5)
    loss, stats = jax.jit(CTC().loss)(jnp.asarray(output), jnp.asarray(weights), sup)
    np.testing.assert_allclose(float(loss) * 4, brute_nll(output[1, :4], [1, 2]), rtol=1e-5)
    assert float(stats["count"]) == 2
    # and making such a chunk's supervision warns
    with pytest.warns(UserWarning, match="1 of 2 chunks"):
        CTC().supervision(np.array([[1, 2, 1], [1, 1, 2]]), np.ones((2, 3)), subsampling=2)


def test_greedy_decode_and_edit_distance_against_numpy():
    rng = np.random.default_rng(6)
    output = rng.standard_normal((8, 12, 4)).astype(np.float32)
    lengths = rng.integers(1, 13, 8)
    frames = np.arange(12)[None] < lengths[:, None]
    hyp, hyp_lengths = jax.jit(greedy_decode)(jnp.asarray(output), jnp.asarray(frames))
    refs = [rng.integers(1, 4, rng.integers(0, 7)) for _ in range(8)]
    for i in range(8):
        expected = ctc_collapse(list(output[i, : lengths[i]].argmax(-1)))
        assert list(np.asarray(hyp[i, : hyp_lengths[i]])) == expected
    labels = np.zeros((8, 6), np.int32)
    for i, r in enumerate(refs):
        labels[i, : len(r)] = r
    distances = jax.jit(edit_distances)(
        jnp.asarray(labels), jnp.asarray([len(r) for r in refs]), hyp, hyp_lengths.astype(jnp.int32)
    )
    for i, r in enumerate(refs):
        expected = ctc_collapse(list(output[i, : lengths[i]].argmax(-1)))
        assert int(distances[i]) == edit_distance(r, expected) == _levenshtein(list(r), expected)


def _levenshtein(a, b):
    """Textbook recursion with memo (independent of symnet's)."""
    from functools import lru_cache

    @lru_cache(None)
    def d(i, j):
        if not i or not j:
            return i or j
        return min(d(i - 1, j) + 1, d(i, j - 1) + 1, d(i - 1, j - 1) + (a[i - 1] != b[j - 1]))

    return d(len(a), len(b))


def test_supervision_collapses_each_chunks_frame_labels():
    targets = np.array([[3, 3, 1, 1, 0, 2, 2, 2], [1, 1, 1, 1, 1, 2, 2, 2]])
    weights = np.array([[1] * 8, [1] * 5 + [0] * 3], np.float32)
    sup = CTC().supervision(targets, weights)
    assert sup["labels"].tolist() == [[3, 1, 2], [1, 0, 0]]
    assert sup["label_paddings"].tolist() == [[0, 0, 0], [0, 1, 1]]
    assert collapse(np.array([2, 2, 0, 2]), 0).tolist() == [2, 2]


def test_objective_names():
    """Every name is an Objective from the registry; `xent` is `linear`; an Objective passes through unchanged."""
    assert get_objective("xent") == get_objective("linear") == Linear()
    assert get_objective("linear").per_frame and get_objective("linear").describe() == "linear"
    assert get_objective("quadratic").per_frame and get_objective("quadratic").describe() == "quadratic"
    assert isinstance(get_objective("ctc"), CTC) and not get_objective("ctc").per_frame
    assert get_objective("chain").name == "chain"
    mine = CTC(blank=2)
    assert get_objective(mine) is mine
    assert FitOptions(objective="xent").objective == Linear() and FitOptions(objective=mine).objective is mine
    with pytest.raises(TrainingError, match=r"unknown objective 'mmi'; fit takes \('linear', 'xent', 'quadratic'"):
        get_objective("mmi")
    with pytest.raises(TrainingError, match="objective must be a string"):
        FitOptions(objective=3)


# -- the built-in task's phones -------------------------------------------------------------------------------

FEAT = 6


@pytest.fixture(scope="module")
def task():
    return HmmTask.create(
        seed=0, num_phones=5, successors=2, states_per_phone=2, feat_dim=FEAT, min_length=40, max_length=80
    )


def test_phone_transcripts_and_viterbi_reference(task):
    data = task.sample(5, seed=1)
    for labels, phones, transcript in zip(data.labels, task.phone_alignments(data), task.transcripts(data)):
        assert (phones == labels // 2).all()
        expected = [p for i, p in enumerate(phones) if i == 0 or p != phones[i - 1]]
        assert transcript.tolist() == expected
    assert [d.tolist() for d in task.phone_dataset(data).labels] == [
        (p + 1).tolist() for p in task.phone_alignments(data)
    ]
    # the Viterbi state path of the true model: better than a single frame's best state, and its phone error
    # rate is the task's reference
    path = task.viterbi(data.features[0])
    assert path.shape == data.labels[0].shape and np.mean(path == data.labels[0]) > 0.6
    reference = task.viterbi_phone_error_rate(data)
    hyps = [collapse(task.viterbi(f) // 2) for f in data.features]
    assert reference == pytest.approx(phone_error_rate(hyps, task.transcripts(data)))
    assert 0 <= reference < 0.2
    # a random phone sequence is far worse
    rng = np.random.default_rng(0)
    assert phone_error_rate([rng.integers(0, 5, len(t)) for t in task.transcripts(data)], task.transcripts(data)) > 0.5


# -- fit ------------------------------------------------------------------------------------------------------


def affine(x, fan_in, fan_out, name):
    return x @ Weight(Normal((fan_in, fan_out), 1.0 / math.sqrt(fan_in)), name=f"{name}.w") + Weight(
        Zeros(fan_out), name=f"{name}.b"
    )


def splice(x, offsets):
    return Append(*[Offset(x, o) if o else x for o in offsets])


def tdnn(out_dim, log_softmax=True):
    x = Input("input", FEAT)
    h = ReLU(affine(splice(x, (-2, -1, 0, 1, 2)), 5 * FEAT, 24, "l1"))
    h = ReLU(affine(splice(h, (-3, 0, 3)), 72, 24, "l2"))
    out = affine(h, 24, out_dim, "out")
    return Network(LogSoftmax(out) if log_softmax else out, seed=0)


def greedy_per(network, task, data, k=1):
    outputs = network.compute(list(data.features))
    hyps = [collapse(np.asarray(o)[::k].argmax(-1), 0) - 1 for o in outputs]
    return phone_error_rate(hyps, task.transcripts(data))


@pytest.mark.parametrize("k", [pytest.param(1, marks=pytest.mark.slow), 3])
def test_a_short_ctc_fit_lowers_the_phone_error_rate(task, k):
    train, valid = task.sample(40, seed=1), task.sample(12, seed=2)
    net = tdnn(task.num_phones + 1)
    before = greedy_per(net, task, valid, k)
    result = fit(
        net,
        task.phone_dataset(train),
        optax.adam(1e-2),
        objective="ctc",
        chunk=30,
        batch_size=16,
        epochs=4,
        progress=False,
        valid=task.phone_dataset(valid),
        frame_subsampling_factor=k,
    )
    after = greedy_per(result.network, task, valid, k)
    assert before > 0.85 and after < 0.5 * before and after < 0.8, (before, after)
    # the reported accuracy is 1 - token error rate of the chunks: it rises
    history = result.history
    assert history[-1].valid_accuracy > history[0].valid_accuracy and history[-1].train_loss < history[0].train_loss


def test_ctc_fit_refuses_mismatched_outputs_and_options(task):
    data = task.phone_dataset(task.sample(4, seed=1))
    with pytest.raises(ShapeError, match="label 5 is out of range for output 'output' of dim 5"):
        fit(tdnn(task.num_phones), data, optax.adam(1e-2), objective="ctc", chunk=30, progress=False)
    with pytest.raises(ShapeError, match="CTC blank 7"):
        fit(tdnn(6), data, optax.adam(1e-2), objective=CTC(blank=7), chunk=30, progress=False)
    with pytest.raises(TrainingError, match="must be multiples of it"):
        fit(tdnn(6), data, optax.adam(1e-2), objective="ctc", chunk=20, frame_subsampling_factor=3, progress=False)
    with pytest.raises(TrainingError, match="frame_subsampling_factor must be an integer >= 1"):
        fit(tdnn(6), data, optax.adam(1e-2), frame_subsampling_factor=0, progress=False)
    floats = Dataset(data.features, data.labels)
    chunks = make_chunks(floats.features, [np.eye(6)[lab] for lab in floats.labels], chunk=30, left=5, right=5)
    with pytest.raises(ShapeError, match="'ctc' objective needs one integer label per frame"):
        fit(tdnn(6), chunks, optax.adam(1e-2), objective="ctc", progress=False)


def test_an_objective_object_plugs_in(task):
    """A user's sequence objective: a per-sequence sum of squares of the outputs' frame means, as a JAX
    function of [B, T, D] with its lengths; fit trains with jax.value_and_grad of it."""

    class MeanSquare(Objective):
        name = "mean-square"

        def check(self, targets, out_dim, what, output):
            pass

        def loss(self, output, weights, supervision):
            lengths = jnp.maximum(weights.sum(1), 1.0)
            means = (output * weights[..., None]).sum(1) / lengths[:, None]
            total = (means**2).sum()
            return total / jnp.maximum(weights.sum(), 1.0), {"correct": jnp.zeros(()), "count": jnp.ones(())}

    data = task.phone_dataset(task.sample(8, seed=1))
    net = tdnn(4, log_softmax=False)
    result = fit(net, data, optax.adam(1e-2), objective=MeanSquare(), chunk=30, epochs=3, progress=False)
    assert result.history[-1].train_loss < 0.3 * result.history[0].train_loss


# -- frame subsampling ----------------------------------------------------------------------------------------


def test_subsampled_linear_objective_trains_every_kth_frame_only(task):
    data = task.sample(3, seed=1)
    net = tdnn(10)
    chunks = make_chunks(data.features, data.labels, chunk=30, left=5, right=5)
    trainer = training.Trainer(
        net,
        optax.sgd(0.1),
        batch_size=2,
        chunks=chunks,
        objective=Linear(),
        input="input",
        output="output",
        frame_subsampling_factor=3,
    )
    idx = np.arange(2)
    minibatch = trainer.minibatch(0, chunks, idx)
    x, targets, weights = trainer.arrays(minibatch)
    # the request asks for chunk frames 0, 3, ..., 27 only: 10 rows per chunk, t-major (row t * 2 + n)
    value = trainer.computation_for(30)(net, {"input": x})["output"]
    assert value.shape == (10 * 2, 10)
    loss, correct, deltas = trainer.loss({"output": value}, targets, weights)
    assert list(deltas) == ["output"]
    logp = np.asarray(value).reshape(10, 2, 10)
    labels = np.stack([chunks.targets[0], chunks.targets[1]], 1)[::3]
    w = np.stack([chunks.weights[0], chunks.weights[1]], 1)[::3]
    picked = np.take_along_axis(logp, labels[..., None], -1)[..., 0]
    expected = -(picked * w).sum() / w.sum()
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    assert float(np.asarray(weights).sum()) == w.sum()  # the frames a step counts (`step`'s last result)
    # and those rows are the full request's rows at frames 0, 3, ...
    from symnet._src.core.index import IndexSet
    from symnet.engine import ComputationRequest, compile

    every = compile(
        net,
        ComputationRequest(
            inputs={"input": IndexSet.range(n=2, t=(-5, 35))}, outputs={"output": IndexSet.range(n=2, t=30)}
        ),
    )(net, {"input": x})["output"]
    np.testing.assert_allclose(np.asarray(every).reshape(30, 2, 10)[::3], logp, atol=1e-5)


def test_outputs_at_every_kth_frame_equal_a_request_of_those_frames(task):
    """The claim subsampling rests on: a time-invariant network's output at frame t does not depend on which
    other frames are requested."""
    from symnet._src.core.index import IndexSet
    from symnet.engine import ComputationRequest, compile

    net = tdnn(6)
    x = np.random.default_rng(1).standard_normal((30 + 10, FEAT)).astype(np.float32)
    full = compile(
        net, ComputationRequest(inputs={"input": IndexSet.range(t=(-5, 35))}, outputs={"output": IndexSet.range(t=30)})
    )(net, {"input": x})["output"]
    sparse = compile(
        net,
        ComputationRequest(
            inputs={"input": IndexSet.range(t=(-5, 35))}, outputs={"output": IndexSet.range(t=range(0, 30, 3))}
        ),
    )(net, {"input": x})["output"]
    np.testing.assert_allclose(np.asarray(full)[::3], np.asarray(sparse), atol=1e-5)
