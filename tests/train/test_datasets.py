"""Tests of the synthetic HMM acoustic task: determinism, shapes, exact posteriors, accuracy ceilings, errors."""

import itertools

import attrs
import numpy as np
import pytest

from symnet.datasets import Dataset, HmmTask, accuracy
from symnet.errors import ShapeError, SymnetError


@pytest.fixture(scope="module")
def task():
    return HmmTask.create(seed=0)


@pytest.fixture(scope="module")
def data(task):
    return task.sample(20, seed=1)


def tiny_task(min_length=5, max_length=5):
    """3 states; state 0 cannot follow state 2, so the transition matrix has zeros (log -inf)."""
    return HmmTask(
        states_per_phone=1,
        min_length=min_length,
        max_length=max_length,
        init=[0.5, 0.3, 0.2],
        trans=[[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.0, 0.4, 0.6]],
        means=[[0.0, 0.0], [0.8, -0.3], [0.2, 0.9]],
        variances=[[1.0, 0.5], [0.7, 1.2], [1.5, 0.8]],
    )


def brute_force_posteriors(task, x):
    """P(s_t = j | x) by summing the joint over all S^T state sequences."""
    init, trans, mu, var = task.init, task.trans, task.means, task.variances
    emit = np.prod(np.exp(-0.5 * (x[:, None, :] - mu) ** 2 / var) / np.sqrt(2 * np.pi * var), axis=-1)
    n, s = x.shape[0], len(init)
    post = np.zeros((n, s))
    for path in itertools.product(range(s), repeat=n):
        p = init[path[0]] * emit[0, path[0]]
        for t in range(1, n):
            p *= trans[path[t - 1], path[t]] * emit[t, path[t]]
        post[np.arange(n), path] += p
    return post / post.sum(axis=1, keepdims=True)


def test_create_is_deterministic_and_a_value():
    a, b, c = HmmTask.create(seed=0), HmmTask.create(seed=0), HmmTask.create(seed=1)
    assert a == b and hash(a) == hash(b)
    assert a != c
    assert "num_states=30" in repr(a)
    with pytest.raises(ValueError):
        a.means[0, 0] = 1.0  # read-only


def test_model_is_a_proper_hmm(task):
    assert 20 <= task.num_states <= 40 and 13 <= task.feat_dim <= 20
    np.testing.assert_allclose(task.init.sum(), 1.0)
    np.testing.assert_allclose(task.trans.sum(axis=1), 1.0)
    k = task.states_per_phone
    for s in range(task.num_states):  # left-to-right within a phone, phone exits go to first states
        allowed = {s, s + 1} if s % k < k - 1 else {s} | set(range(0, task.num_states, k))
        assert set(np.flatnonzero(task.trans[s])) <= allowed


def test_sample_is_deterministic(task):
    assert task.sample(4, seed=3) == task.sample(4, seed=3)
    assert task.sample(4, seed=3) != task.sample(4, seed=4)


def test_sample_shapes_dtypes_labels_lengths(task, data):
    assert len(data) == 20
    lengths = data.lengths
    assert np.all((lengths >= 100) & (lengths <= 300)) and len(set(lengths.tolist())) > 5
    assert data.num_frames == lengths.sum()
    for f, labels, n in zip(data.features, data.labels, lengths, strict=True):
        assert f.dtype == np.float32 and f.shape == (n, task.feat_dim)
        assert labels.dtype == np.int32 and labels.shape == (n,)
        assert labels.min() >= 0 and labels.max() < task.num_states
        assert np.all(task.trans[labels[:-1], labels[1:]] > 0)  # labels follow the chain
        assert task.init[labels[0]] > 0


def test_posteriors_match_brute_force_enumeration():
    task = tiny_task()
    rng = np.random.default_rng(5)
    for _ in range(3):
        x = rng.normal(0.0, 1.0, size=(5, 2))
        post = task.posteriors(x)
        np.testing.assert_allclose(post.sum(axis=1), 1.0, rtol=1e-12)
        np.testing.assert_allclose(post, brute_force_posteriors(task, x), rtol=1e-9, atol=1e-12)
    # and on the task's own samples
    d = task.sample(2, seed=0)
    for f in d.features:
        np.testing.assert_allclose(task.posteriors(f), brute_force_posteriors(task, f.astype(np.float64)), atol=1e-9)


def test_posteriors_are_stable_on_extreme_features(task):
    x = np.full((50, task.feat_dim), 1e3)
    x[::7] = -1e3
    logp = task.log_posteriors(x)
    assert np.all(np.isfinite(np.exp(logp)))
    np.testing.assert_allclose(np.exp(logp).sum(axis=1), 1.0, rtol=1e-10)


def test_batched_bayes_accuracy_equals_per_sequence_argmax(task):
    d = task.sample(5, seed=11)  # different lengths: exercises padding in the batched forward-backward
    per_seq = [task.posteriors(f) for f in d.features]
    for p in per_seq:
        np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-10)
    assert task.bayes_accuracy(d) == accuracy(per_seq, d)


def test_window_accuracy_spans_single_frame_to_bayes():
    task = tiny_task(min_length=6, max_length=9)
    d = task.sample(30, seed=2)
    assert task.window_accuracy(d, context=9) == task.bayes_accuracy(d)
    # brute force on each window, with the prior the window model documents for the window's first frame
    for context in (0, 1, 2):
        correct = 0
        for f, labels in zip(d.features[:6], d.labels[:6], strict=True):
            for t in range(len(labels)):
                a, b = max(t - context, 0), min(t + context, len(labels) - 1)
                prior = task.init if a == 0 else task.frame_marginal(1)
                window_task = attrs.evolve(task, init=prior)
                post = brute_force_posteriors(window_task, f[a : b + 1].astype(np.float64))
                correct += post[t - a].argmax() == labels[t]
        sub = Dataset(d.features[:6], d.labels[:6])
        assert task.window_accuracy(sub, context) == pytest.approx(correct / sub.num_frames)


def test_context_helps_on_the_default_task(task, data):
    single, bayes = task.single_frame_accuracy(data), task.bayes_accuracy(data)
    window1 = task.window_accuracy(data, context=1)
    assert 0.45 < single < 0.70
    assert 0.85 < bayes < 0.96
    assert bayes - single > 0.15
    assert single < window1 < bayes + 1e-9


def test_frame_marginal_matches_label_frequencies(task):
    marg = task.frame_marginal()
    np.testing.assert_allclose(marg.sum(), 1.0)
    labels = np.concatenate(task.sample(60, seed=9).labels)
    freq = np.bincount(labels, minlength=task.num_states) / len(labels)
    assert np.abs(freq - marg).max() < 0.02


def test_split_and_padded(data):
    train, valid = data.split(0.75)
    assert (len(train), len(valid)) == (15, 5)
    assert train.features[0] is data.features[0] and valid.labels[-1] is data.labels[-1]
    x, y, mask = valid.padded()
    assert x.shape == (5, valid.lengths.max(), data.feat_dim) and y.shape == mask.shape == x.shape[:2]
    np.testing.assert_array_equal(mask.sum(1), valid.lengths)
    assert np.all(y[~mask] == -1) and np.all(x[~mask] == 0)
    np.testing.assert_array_equal(y[1, : valid.lengths[1]], valid.labels[1])


def test_errors_name_the_bad_value(task, data):
    with pytest.raises(ShapeError, match=r"\(7, 5\)"):
        task.posteriors(np.zeros((7, 5)))
    with pytest.raises(ShapeError, match="non-finite.*frame 2"):
        task.posteriors(np.where(np.arange(4)[:, None] == 2, np.nan, np.zeros((4, task.feat_dim))))
    empty = Dataset([], [])
    for method in (task.bayes_accuracy, task.single_frame_accuracy, lambda d: task.window_accuracy(d, 2)):
        with pytest.raises(ShapeError, match="empty"):
            method(empty)
    wrong_dim = Dataset([np.zeros((3, 4))], [np.zeros(3)])
    with pytest.raises(ShapeError, match="dim 4"):
        task.bayes_accuracy(wrong_dim)
    bad_labels = Dataset([np.zeros((3, task.feat_dim))], [[0, 99, 1]])
    with pytest.raises(ShapeError, match="99"):
        task.single_frame_accuracy(bad_labels)
    with pytest.raises(ShapeError, match=r"\(4, 16\).*\(3,\)"):
        Dataset([np.zeros((4, 16))], [np.zeros(3)])
    with pytest.raises(ShapeError, match="1.5"):
        data.split(1.5)
    with pytest.raises(ShapeError, match="num_sequences=0"):
        task.sample(0, seed=0)
    with pytest.raises(ShapeError, match="successors=10"):
        HmmTask.create(successors=10)
    with pytest.raises(ShapeError, match="trans is not a probability.*1.1"):
        attrs.evolve(tiny_task(), trans=[[0.7, 0.3, 0.1], [0.2, 0.5, 0.3], [0.0, 0.4, 0.6]])
    with pytest.raises(ShapeError, match="-1.0"):
        attrs.evolve(tiny_task(), variances=-np.ones((3, 2)))
    with pytest.raises(ShapeError, match="context=-1"):
        task.window_accuracy(data, -1)
    with pytest.raises(ShapeError, match="3 predictions for 20"):
        accuracy([np.zeros(1)] * 3, data)
    assert issubclass(ShapeError, SymnetError)


def test_a_sample_too_large_to_draw_is_refused_before_anything_is_allocated():
    """Before: `symnet train --data builtin:hmm:99999999999999` was a raw MemoryError (728 TiB)."""
    from symnet.datasets import MAX_SAMPLE_VALUES

    task = HmmTask.create(seed=0)
    most = MAX_SAMPLE_VALUES // (task.max_length * task.feat_dim)
    with pytest.raises(ShapeError, match=rf"more than the {MAX_SAMPLE_VALUES} one call draws \(at most {most} "):
        task.sample(99_999_999_999_999, seed=0)
    for bad in (0, 2.5, True, "10"):
        with pytest.raises(ShapeError, match="must be an integer >= 1"):
            task.sample(bad, seed=0)
