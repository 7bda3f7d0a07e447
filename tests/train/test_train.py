"""Training: chunked examples with context, one compiled step, `fit` with Kaldi's objectives,
determinism, checkpoints (resume, refusal, no pickle, atomic writes) and clear errors on bad input."""

from __future__ import annotations

import io
import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from helpers import EXAMPLES
from symnet import Append, Input, Log, LogSoftmax, Network, Normal, Offset, ReLU, ShapeError, SymnetError, Weight, Zeros
from symnet._src.train import checkpoint as ckpt
from symnet._src.train import fit_data, objectives, setups
from symnet._src.train import trainer as training
from symnet._src.train.objectives import Linear
from symnet.datasets import Dataset, HmmTask
from symnet.train import CheckpointError, Chunks, KaldiRulesWarning, TrainingError, fit, make_chunks

FEAT, CLASSES, CHUNK, BATCH = 4, 6, 7, 3


def affine(x, fan_in, fan_out, name):
    return x @ Weight(Normal((fan_in, fan_out), 1.0 / math.sqrt(fan_in)), name=f"{name}.w") + Weight(
        Zeros(fan_out), name=f"{name}.b"
    )


def splice(x, offsets):
    return Append(*[Offset(x, o) if o else x for o in offsets])


def tdnn(seed=0, width=8):
    """Context (3, 3): frames t-1..t+1, then t-2, t, t+2 of the hidden layer."""
    x = Input("input", FEAT)
    h = ReLU(affine(splice(x, (-1, 0, 1)), 3 * FEAT, width, "l1"))
    return Network(LogSoftmax(affine(splice(h, (-2, 0, 2)), 3 * width, CLASSES, "out")), seed=seed)


@pytest.fixture(scope="module")
def data():
    task = HmmTask.create(
        seed=0, num_phones=3, successors=2, states_per_phone=2, feat_dim=FEAT, min_length=20, max_length=40
    )
    return task.sample(8, seed=1), task.sample(3, seed=2)


@pytest.fixture(scope="module")
def whole(data):
    """One uninterrupted 3-epoch run with validation."""
    train, valid = data
    return run(tdnn(), train, valid=valid, epochs=3, seed=7)


def run(net, train, opt=None, **kw):
    kw = {"epochs": 2, "batch_size": BATCH, "chunk": CHUNK, "progress": False, **kw}
    return fit(net, train, opt or optax.adam(1e-2), **kw)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def params_equal(a, b):
    return a.keys() == b.keys() and all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in a)


def tree_equal(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(la, lb, strict=True))


# ----- examples: chunks with context, Kaldi's row order ------------------------------------------------


def test_chunks_carry_the_context_with_clamped_edges():
    feats = np.arange(10, dtype=np.float32)[:, None] * np.ones((1, 2), np.float32)  # feature = frame number
    labels = np.arange(10) % 3
    c = make_chunks([feats], [labels], chunk=4, left=2, right=1)
    assert isinstance(c, Chunks) and len(c) == 3 and c.chunk == 4 and (c.left, c.right) == (2, 1)
    assert c.features.shape == (3, 4 + 2 + 1, 2)
    np.testing.assert_array_equal(c.features[0, :, 0], [0, 0, 0, 1, 2, 3, 4])  # left edge repeats frame 0
    np.testing.assert_array_equal(c.features[1, :, 0], [2, 3, 4, 5, 6, 7, 8])
    np.testing.assert_array_equal(c.features[2, :, 0], [6, 7, 8, 9, 9, 9, 9])  # right edge repeats frame 9
    np.testing.assert_array_equal(c.weights, [[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]])  # padding weighs 0
    np.testing.assert_array_equal(c.targets[1], labels[4:8])
    assert c.num_frames == 10


def test_minibatch_rows_are_in_kaldis_t_major_order():
    feats = [np.full((5, 1), 10.0 * s, np.float32) + np.arange(5, dtype=np.float32)[:, None] for s in range(3)]
    c = make_chunks(feats, [np.arange(5)] * 3, chunk=5, left=1, right=0)
    x, targets, weights = c.minibatch(np.array([2, 0]))
    # rows (t, n): t = -1..4 outer, n = 0, 1 inner; n=0 is sequence 2, n=1 is sequence 0
    np.testing.assert_array_equal(x[:, 0], [20, 0, 20, 0, 21, 1, 22, 2, 23, 3, 24, 4])
    np.testing.assert_array_equal(targets, np.repeat(np.arange(5), 2))
    assert weights.shape == (10,)


def test_chunked_outputs_equal_whole_sequence_outputs(data):
    """The chunked request of `fit` computes what nnet3-compute computes on whole sequences."""
    train, _ = data
    net = tdnn()
    assert net.context() == (3, 3)
    chunks = fit_data.as_chunks(train, net, CHUNK, "output")
    assert (chunks.left, chunks.right) == net.context()
    trainer = training.Trainer(
        net, optax.sgd(0.1), batch_size=BATCH, chunks=chunks, objective=Linear(), input="input", output="output"
    )
    whole = net.compute([train.features[0]])
    out = np.asarray(trainer.computation(net, {"input": jnp.asarray(chunks.minibatch(np.arange(BATCH))[0])})["output"])
    out = out.reshape(CHUNK, BATCH, CLASSES)
    length = len(train.features[0])
    assert length > (BATCH - 1) * CHUNK  # the first BATCH chunks all come from sequence 0
    for n in range(BATCH):
        start = n * CHUNK
        valid = min(CHUNK, length - start)
        np.testing.assert_allclose(out[:valid, n], np.asarray(whole[0])[start : start + valid], rtol=1e-5, atol=1e-5)


def test_one_compiled_step_for_all_minibatches(data, monkeypatch):
    """Every minibatch (the last, partly filled one too) is the same regular request: the step is traced
    and compiled once, and its row movements are slices, not gathers."""
    train, valid = data
    traced, trainers = [], []
    objective = objectives.objective
    monkeypatch.setattr(objectives, "objective", lambda *a: (traced.append(a[0]), objective(*a))[1])
    init = training.Trainer.__init__
    monkeypatch.setattr(
        training.Trainer, "__init__", lambda self, *a, **k: (init(self, *a, **k), trainers.append(self))[0]
    )
    result = run(tdnn(), train, valid=valid, epochs=3)
    (trainer,) = trainers
    steps = result.history[-1].step
    assert steps == 3 * math.ceil(len(fit_data.as_chunks(train, tdnn(), CHUNK, "output")) / BATCH) > 20
    assert traced == ["linear", "linear"]  # one trace of the training step, one of the evaluation
    assert trainer.jitted_step._cache_size() == 1 and trainer.jitted_evaluate._cache_size() == 1
    computation = trainer.computation
    assert computation.regular
    maps = [m for s in computation.steps for m in getattr(s, "maps", ()) if m is not None]
    maps += [m for _, m in computation.input_maps.values()] + list(computation.output_maps.values())
    assert maps and all(m.kind != "gather" for m in maps), [m.kind for m in maps]
    chunks = fit_data.as_chunks(train, tdnn(), CHUNK, "output")
    x, t, w = trainer.arrays(trainer.minibatch(0, chunks, np.arange(BATCH)))
    jaxpr = str(jax.make_jaxpr(trainer.jitted_step)(result.network, result.opt_state, x, t, w))
    assert "gather" not in jaxpr and "scatter" not in jaxpr


def test_resumed_run_does_not_recompile(data, tmp_path, monkeypatch):
    train, _ = data
    path = str(tmp_path / "c.npz")
    setups._kept.clear()
    run(tdnn(), train, checkpoint=path, checkpoint_every=2, max_steps=5)
    run(tdnn(), train, checkpoint=path, checkpoint_every=2)
    (trainer,) = setups._kept.values()  # the first run's, kept for the resumed one (the same setup)
    assert trainer.jitted_step._cache_size() == 1  # the loaded parameters are the same kind of array as fresh ones


def test_fit_records_the_computations_its_steps_call(data):
    """The training step and the evaluation call their Computations inside their own jitted programs, and
    `symnet.engine.record` sees them as it sees the runner's: each fit, a kept setup's too."""
    from symnet.engine import record

    train, valid = data
    setups._kept.clear()
    for _ in range(2):  # the second fit reuses the first one's Trainer and its compiled programs
        with record() as ran:
            run(tdnn(), train, valid=valid, epochs=1, lowering="plain")
        (trainer,) = setups._kept.values()
        assert trainer.test_computation is trainer.computation  # no test-mode layer: validation computes the same
        assert ran.computations == [trainer.computation]
        assert "lowering='plain'" in ran.explain()


def test_fit_trains_with_one_blas_thread_and_gives_the_count_back(data):
    """fit's steps run with one thread in every BLAS library (their small LAPACK calls, natural gradient's, are
    slower with OpenBLAS's own threads: benchmarks/blas_threads.py), and the count set before is back after."""
    import scipy.linalg.cython_lapack  # noqa: F401  (scipy's BLAS loaded, as jaxlib's LAPACK calls load it)
    from threadpoolctl import threadpool_info, threadpool_limits

    def counts():
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    seen = []
    with threadpool_limits(limits=2, user_api="blas"):
        before = counts()
        if not before or min(before) < 2:
            pytest.skip(f"this machine's BLAS libraries cannot run 2 threads ({before})")
        run(tdnn(), data[0], epochs=1, max_steps=2, on_step=lambda _: seen.append(counts()))
        after = counts()
    assert len(seen) == 2 and all(c == [1] * len(before) for c in seen)
    assert after == before


# ----- fit: objectives, validation, determinism ---------------------------------------------------------


def test_fit_linear_learns_and_validates(data, capsys):
    train, valid = data
    seen = []
    result = run(tdnn(), train, valid=valid, epochs=4, on_epoch=seen.append, progress=True)
    printed = capsys.readouterr()
    steps = result.history[-1].step
    assert f"{steps}/{steps}" in printed.err  # the progress bar
    assert "epoch 3: train loss" in printed.out and "valid loss" in printed.out  # its report per epoch
    history = result.history
    assert len(history) == 4 and list(seen) == list(history)
    assert [h.epoch for h in history] == [0, 1, 2, 3]
    assert history[-1].train_loss < history[0].train_loss
    assert history[-1].valid_loss < history[0].valid_loss
    assert all(0.0 <= h.valid_accuracy <= 1.0 and h.valid_loss is not None for h in history)
    # the validation score is the mean cross-entropy of the network's log-probabilities over all frames
    out = result.network.compute(list(valid.features))
    ce = -np.mean(np.concatenate([np.asarray(o)[np.arange(len(y)), y] for o, y in zip(out, valid.labels, strict=True)]))
    acc = np.mean(np.concatenate([np.asarray(o).argmax(-1) == y for o, y in zip(out, valid.labels, strict=True)]))
    assert history[-1].valid_loss == pytest.approx(ce, rel=1e-4)
    assert history[-1].valid_accuracy == pytest.approx(acc, abs=1e-6)
    assert run(tdnn(), train, epochs=1).history[0].valid_loss is None


def test_fit_quadratic_learns_a_regression_that_needs_context():
    rng = np.random.default_rng(0)
    feats = [rng.standard_normal((30, 2)).astype(np.float32) for _ in range(6)]
    targets = [np.concatenate([f[:1], f[:-1]], 0) - 0.5 * f for f in feats]  # y_t = x_{t-1} - x_t / 2
    x = Input("input", 2)
    net = Network(affine(splice(x, (-1, 0)), 4, 2, "lin"), seed=0)
    result = run(net, (feats, targets), optax.adam(5e-2), objective="quadratic", epochs=15, valid=(feats, targets))
    assert result.history[-1].valid_loss < 0.01 * result.history[0].train_loss
    w = np.asarray(result.network.values["lin.w"])
    np.testing.assert_allclose(w, np.vstack([np.eye(2), -0.5 * np.eye(2)]), atol=0.05)


def test_fit_is_deterministic_given_the_seed(data, whole):
    train, valid = data
    again = run(tdnn(), train, valid=valid, epochs=3, seed=7)
    assert params_equal(again.network.params, whole.network.params) and tree_equal(again.opt_state, whole.opt_state)
    assert [(h.train_loss, h.valid_loss) for h in again.history] == [
        (h.train_loss, h.valid_loss) for h in whole.history
    ]
    other = run(tdnn(), train, epochs=1, seed=8)  # another seed shuffles the minibatches differently
    assert not params_equal(other.network.params, run(tdnn(), train, epochs=1, seed=7).network.params)


# ----- checkpoints --------------------------------------------------------------------------------------


@pytest.mark.parametrize("every", [2, 0])
def test_resume_after_interruption_is_bit_identical(data, whole, tmp_path, every):
    """Stop mid-epoch (max_steps), call fit again with the same checkpoint: the same parameters, optimiser
    state and history as one uninterrupted run (with every=0 the rerun goes on from the last epoch's end)."""
    train, valid = data
    per_epoch = whole.history[0].step
    path = str(tmp_path / "run.npz")
    stop = per_epoch + per_epoch // 2 + 1  # in the middle of epoch 1
    first = run(tdnn(), train, valid=valid, epochs=3, seed=7, checkpoint=path, checkpoint_every=every, max_steps=stop)
    assert len(first.history) == 1 and os.path.exists(path)
    saved = ckpt.load(path, tdnn(), optax.adam(1e-2).init(tdnn().params))[2]
    last = stop // every * every if every else 0  # the last step saved by checkpoint_every
    assert saved == (ckpt.Position(last, 1, last - per_epoch) if last > per_epoch else ckpt.Position(per_epoch, 1, 0))
    resumed = run(tdnn(), train, valid=valid, epochs=3, seed=7, checkpoint=path, checkpoint_every=every)
    assert params_equal(resumed.network.params, whole.network.params)
    assert tree_equal(resumed.opt_state, whole.opt_state)
    for h1, h2 in zip(resumed.history, whole.history, strict=True):
        assert (h1.epoch, h1.step, h1.train_loss, h1.train_accuracy, h1.valid_loss, h1.valid_accuracy) == (
            h2.epoch,
            h2.step,
            h2.train_loss,
            h2.train_accuracy,
            h2.valid_loss,
            h2.valid_accuracy,
        )
    # a finished run resumed with the same settings has nothing left to do
    again = run(tdnn(), train, valid=valid, epochs=3, seed=7, checkpoint=path)
    assert params_equal(again.network.params, whole.network.params) and len(again.history) == 3


def test_checkpoint_of_another_network_is_refused(data, tmp_path):
    train, _ = data
    path = str(tmp_path / "c.npz")
    run(tdnn(), train, epochs=1, checkpoint=path)
    before = read(path)
    with pytest.raises(CheckpointError, match="different network.*refusing") as e:
        run(tdnn(width=5), train, epochs=2, checkpoint=path)
    assert "l1.w" in str(e.value) and "(12, 5)" in str(e.value) and "(12, 8)" in str(e.value)
    # same parameter names and shapes, another expression (one Offset moved)
    x = Input("input", FEAT)
    h = ReLU(affine(splice(x, (-2, 0, 1)), 3 * FEAT, 8, "l1"))
    other = Network(LogSoftmax(affine(splice(h, (-2, 0, 2)), 24, CLASSES, "out")))
    with pytest.raises(CheckpointError, match="expressions differ"):
        run(other, train, epochs=2, checkpoint=path)
    with pytest.raises(CheckpointError, match="another optimiser"):
        run(tdnn(), train, optax.sgd(0.1), epochs=2, checkpoint=path)
    assert isinstance(e.value, SymnetError) and read(path) == before  # nothing overwritten


def test_checkpoints_are_loaded_without_pickle(data, tmp_path, monkeypatch):
    train, _ = data
    path = str(tmp_path / "c.npz")
    result = run(tdnn(), train, epochs=1, checkpoint=path)
    import pickle

    def forbidden(*a, **k):
        raise AssertionError("a checkpoint was unpickled")

    with monkeypatch.context() as m:  # nothing that can unpickle runs while a checkpoint is read
        for name in ("load", "loads", "Unpickler"):
            m.setattr(pickle, name, forbidden)
        m.setattr(np, "load", forbidden)
        loaded, _, _, _ = ckpt.load(path, tdnn(), result.opt_state)
    assert params_equal(loaded.params, result.network.params)
    # a file holding a pickled object is refused, not unpickled
    with np.load(path) as f:
        arrays = {k: f[k] for k in f.files}
    arrays["param/l1.b"] = np.array([{"evil": 1}], dtype=object)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    evil = tmp_path / "evil.npz"
    evil.write_bytes(buffer.getvalue())
    with pytest.raises(CheckpointError, match="holds object values: only numbers"):
        ckpt.load(str(evil), tdnn(), result.opt_state)
    # damaged files: truncated, not an npz, no header
    good = read(path)
    for name, content in [("cut.npz", good[: len(good) // 2]), ("junk.npz", b"hello"), ("empty.npz", b"")]:
        (tmp_path / name).write_bytes(content)
        with pytest.raises(CheckpointError, match="not a readable checkpoint"):
            ckpt.load(str(tmp_path / name), tdnn(), result.opt_state)
    buffer = io.BytesIO()
    np.savez(buffer, x=np.zeros(2))
    (tmp_path / "noheader.npz").write_bytes(buffer.getvalue())
    with pytest.raises(CheckpointError, match="no valid header"):
        run(tdnn(), train, checkpoint=str(tmp_path / "noheader.npz"))


@pytest.mark.parametrize("failing", ["savez", "replace", "write"])
def test_checkpoint_writes_are_atomic(tmp_path, monkeypatch, failing):
    net, opt = tdnn(), optax.adam(1e-2)
    state = opt.init(net.params)
    path = str(tmp_path / "c.npz")
    ckpt.save(path, net, state, ckpt.Position(3, 0, 3))
    before = read(path)

    def boom(*a, **k):
        raise OSError("disk full (simulated)")

    target = {"savez": (ckpt.np, "savez"), "replace": (ckpt.os, "replace"), "write": (ckpt.os, "fsync")}[failing]
    monkeypatch.setattr(*target, boom)  # fsync fails after the data is written to the temporary file
    with pytest.raises(OSError, match="simulated"):
        ckpt.save(path, tdnn(seed=1), state, ckpt.Position(4, 0, 4))
    assert read(path) == before
    assert os.listdir(tmp_path) == ["c.npz"]  # no temporary file left behind
    monkeypatch.undo()
    loaded, _, position, _ = ckpt.load(path, tdnn(seed=1), state)
    assert position == ckpt.Position(3, 0, 3) and params_equal(loaded.params, net.params)


def test_a_failed_checkpoint_write_during_fit_keeps_the_last_one(data, tmp_path, monkeypatch):
    train, _ = data
    path = str(tmp_path / "c.npz")
    result = run(tdnn(), train, epochs=1, checkpoint=path)
    before = read(path)
    monkeypatch.setattr(ckpt.os, "replace", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full (simulated)")))
    with pytest.raises(OSError, match="simulated"):
        run(result.network, train, epochs=2, checkpoint=path)
    assert read(path) == before and os.listdir(tmp_path) == ["c.npz"]
    monkeypatch.undo()
    net, _, position, _ = ckpt.load(path, tdnn(), result.opt_state)
    assert position == ckpt.Position(result.history[0].step, 1, 0)
    assert params_equal(net.params, result.network.params)


def test_checkpoint_file_mode_follows_the_umask(data, tmp_path):
    train, _ = data
    path = str(tmp_path / "c.npz")
    old = os.umask(0o022)
    try:
        run(tdnn(), train, epochs=1, checkpoint=path)
    finally:
        os.umask(old)
    assert os.stat(path).st_mode & 0o777 == 0o644


# ----- bad input: clear symnet errors, nothing lost -----------------------------------------------------


def bad_input_cases(train):
    feats, labels = list(train.features), list(train.labels)
    nan = [f.copy() for f in feats]
    nan[2][5, 1] = np.nan
    inf = [f.copy() for f in feats]
    inf[1][3, 0] = -np.inf
    high = [y.copy() for y in labels]
    high[3][4] = CLASSES + 3
    low = [y.copy() for y in labels]
    low[0][0] = -1
    return {
        "empty list": (([], []), ShapeError, "empty"),
        "empty dataset": (Dataset([], []), ShapeError, "empty"),
        "label too high": ((feats, high), ShapeError, f"label {CLASSES + 3} is out of range.*dim {CLASSES}"),
        "negative label": ((feats, low), ShapeError, "label -1 is out of range"),
        "float labels": ((feats, [y.astype(np.float32) for y in labels]), ShapeError, "integer label"),
        "feature dim": (([f[:, :3] for f in feats], labels), ShapeError, "dim 3.*'input' has dim 4"),
        "mixed dims": ((feats[:1] + [feats[1][:, :3]], labels[:2]), ShapeError, "sequence 1.*dim 3.*dim 4"),
        "nan": ((nan, labels), ShapeError, r"sequence 2: the features are nan at frame 5, dim 1"),
        "inf": ((inf, labels), ShapeError, r"sequence 1: the features are -inf at frame 3, dim 0"),
        "length mismatch": ((feats, [labels[0][:-1]] + labels[1:]), ShapeError, r"sequence 0: \d+ frames"),
        "counts": ((feats, labels[:-1]), ShapeError, "8 feature sequences but 7"),
        "not data": ("feats.scp", ShapeError, "cannot train on str"),
    }


BAD_INPUTS = [
    "empty list",
    "empty dataset",
    "label too high",
    "negative label",
    "float labels",
    "feature dim",
    "mixed dims",
    "nan",
    "inf",
    "length mismatch",
    "counts",
    "not data",
]


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_training_data_is_a_clear_error_and_keeps_the_checkpoint(data, tmp_path, case):
    train, _ = data
    bad, error, message = bad_input_cases(train)[case]
    path = tmp_path / "c.npz"
    path.write_bytes(b"last good checkpoint")  # never read: the data is checked first
    with pytest.raises(error, match=message) as e:
        run(tdnn(), bad, checkpoint=str(path))
    assert isinstance(e.value, SymnetError)
    assert path.read_bytes() == b"last good checkpoint" and os.listdir(tmp_path) == ["c.npz"]


def test_bad_validation_data_and_settings_are_clear_errors(data):
    train, valid = data
    labels = [y.copy() for y in valid.labels]
    labels[1][2] = 99
    with pytest.raises(ShapeError, match="validation data: label 99 is out of range"):
        run(tdnn(), train, valid=(list(valid.features), labels))
    with pytest.raises(ShapeError, match="validation data: the features have dim 2"):
        run(tdnn(), train, valid=([f[:, :2] for f in valid.features], list(valid.labels)))
    with pytest.raises(TrainingError, match="unknown objective 'mse'"):
        run(tdnn(), train, objective="mse")
    with pytest.raises(SymnetError, match="no output 'scores'"):
        run(tdnn(), train, output="scores")
    with pytest.raises(ShapeError, match=f"quadratic.*dim {CLASSES}.*shape \\(\\)"):
        run(tdnn(), train, objective="quadratic")
    with pytest.raises(ShapeError, match=r"context \(1, 1\), but output 'output' needs \(3, 3\)"):
        run(tdnn(), make_chunks(train.features, train.labels, chunk=CHUNK, left=1, right=1))
    for setting in [{"batch_size": 0}, {"chunk": -2}, {"epochs": 1.5}, {"checkpoint_every": -1}]:
        with pytest.raises(TrainingError, match=f"{next(iter(setting))} must be an integer"):
            run(tdnn(), train, **setting)
    targets = [np.zeros((len(f), CLASSES), np.float32) for f in train.features]
    targets[0][1, 2] = np.inf
    with pytest.raises(ShapeError, match="targets contain inf"):
        run(tdnn(), (list(train.features), targets), objective="quadratic")


def log_network():
    x = Input("input", FEAT)
    return Network(LogSoftmax(affine(Log(x), FEAT, CLASSES, "o")), seed=0)  # Log of negative features: NaN


def test_log_of_a_negative_value_names_the_step_and_the_node(data, tmp_path):
    train, _ = data
    with pytest.raises(TrainingError) as e:
        run(log_network(), train, checkpoint=str(tmp_path / "c.npz"))
    message = str(e.value)
    assert "the loss is nan at step 1 " in message
    assert "first non-finite value: Log node `Log(Input('input', 4))`" in message
    assert "test_train.py" in message  # where the user built the node
    assert not os.listdir(tmp_path)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # the learning rate 1e39
def test_a_diverging_run_never_overwrites_the_last_good_checkpoint(data, tmp_path):
    train, _ = data
    path = str(tmp_path / "c.npz")
    good = run(tdnn(), train, optax.sgd(0.1), epochs=1, checkpoint=path)
    before = read(path)
    # a huge learning rate: the loss goes NaN a few steps into epoch 1; only epoch ends are saved
    with pytest.raises(TrainingError, match=r"the loss is (nan|inf) at step (\d+) .*first non-finite value: \w+ ") as e:
        run(tdnn(), train, optax.sgd(1e30), epochs=2, checkpoint=path)
    assert f"{path} is kept" in str(e.value) and "test_train.py" in str(e.value)
    step = int(str(e.value).split("at step ")[1].split()[0])
    assert step > good.history[0].step
    assert read(path) == before
    # an update that overflows the parameters is caught before they are saved, even with checkpoint_every=1
    with pytest.raises(TrainingError, match=r"update at step \d+ .*made parameter\(s\) \[.*'out.w'.*NaN or Inf"):
        run(tdnn(), train, optax.sgd(1e39), epochs=2, checkpoint=path, checkpoint_every=1)
    assert read(path) == before and os.listdir(tmp_path) == ["c.npz"]
    # and training goes on from the good checkpoint
    resumed = run(tdnn(), train, optax.sgd(0.1), epochs=2, checkpoint=path)
    whole = run(tdnn(), train, optax.sgd(0.1), epochs=2)
    assert params_equal(resumed.network.params, whole.network.params)


# ----- the loop reads a step's results while the next step computes ------------------------------------------


def test_a_step_is_read_after_the_next_is_dispatched(data, monkeypatch):
    train, _ = data
    events = []
    step = training.Trainer.step

    def dispatch(self, *args):
        events.append("dispatch")
        return step(self, *args)

    monkeypatch.setattr(training.Trainer, "step", dispatch)
    result = run(tdnn(), train, on_step=lambda s: events.append(f"read {s.step}"))
    per_epoch, total = result.history[0].step, result.history[-1].step
    dispatches = [i for i, e in enumerate(events) if e == "dispatch"]
    reads = {int(e.split()[1]): i for i, e in enumerate(events) if e.startswith("read")}
    assert len(dispatches) == total and sorted(reads) == list(range(1, total + 1))
    for k in range(1, total + 1):
        assert dispatches[k - 1] < reads[k]  # read after its own dispatch
        if k % per_epoch:  # within an epoch, after the next step's dispatch; an epoch's last is read at its end
            assert reads[k] > dispatches[k]
        elif k < total:
            assert reads[k] < dispatches[k]


def test_the_first_non_finite_step_is_named_and_no_later_step_reported(data):
    train, _ = data
    x = Log(Input("input", FEAT) + 20.0)  # NaN where a feature is below -20
    network = Network(LogSoftmax(affine(x, FEAT, CLASSES, "out")), seed=0)
    # features below -20 in one sequence only: the first minibatch with a chunk of it is the first NaN loss
    features = [np.asarray(f).copy() for f in train.features]
    assert min(f.min() for f in features) > -20
    features[5] = features[5] * 0 - 50.0
    reported = []
    with pytest.raises(TrainingError, match=r"the loss is nan at step (\d+) ") as e:
        run(network, (features, list(train.labels)), on_step=reported.append, epochs=1)
    failed = int(str(e.value).split("at step ")[1].split()[0])
    assert [s.step for s in reported] == list(range(1, failed))
    assert all(np.isfinite(s.loss) for s in reported)
    assert "first non-finite value: Log node" in str(e.value)


def test_max_steps_and_checkpoints_stop_at_the_same_state(data, tmp_path):
    train, _ = data
    whole = run(tdnn(), train, epochs=1)
    steps = whole.history[0].step
    stopped = run(tdnn(), train, epochs=1, max_steps=steps - 1)
    path = str(tmp_path / "c.npz")
    run(tdnn(), train, epochs=1, max_steps=steps - 1, checkpoint=path, checkpoint_every=1)
    resumed = run(tdnn(), train, epochs=1, checkpoint=path)
    assert params_equal(resumed.network.params, whole.network.params)
    for name, value in whole.network.params.items():
        assert not np.array_equal(np.asarray(stopped.network.params[name]), np.asarray(value)), name


def test_checkpoint_header_is_json_with_the_fingerprint(data, tmp_path):
    train, _ = data
    path = str(tmp_path / "c.npz")
    run(tdnn(), train, epochs=1, checkpoint=path)
    with np.load(path, allow_pickle=False) as f:
        header = json.loads(f["header"].tobytes().decode())
        assert all(f[k].dtype != object for k in f.files)
    assert header["format"] == "symnet-checkpoint" and header["fingerprint"] == tdnn().fingerprint()


def test_training_mode_batchnorm_stores_its_statistics_for_test_mode():
    """fit accumulates every training-mode BatchNorm's statistics (zeroed each epoch, as Kaldi does per job)."""

    from symnet.components import set_test_mode
    from symnet.kaldi import read_network

    net = read_network(EXAMPLES / "tdnnf.config")
    rng = np.random.default_rng(0)
    feats = [rng.standard_normal((40, 20)).astype(np.float32) * 2 + 3 for _ in range(4)]
    labels = [rng.integers(0, 10, 40) for _ in range(4)]
    # The config's natural-gradient affines are an option fit does not honour without natural_gradient: it says so.
    with pytest.warns(KaldiRulesWarning, match=r"natural gradient .*tdnn1\.affine"):
        trained = fit(net, (feats, labels), optax.sgd(1e-3), epochs=2, batch_size=4, chunk=20, progress=False).network
    count = float(trained.values["tdnn1.batchnorm.count"])
    mean = np.asarray(trained.values["tdnn1.batchnorm.stats_mean"])
    assert count > 0 and np.isfinite(mean).all() and np.abs(mean).max() > 0
    untrained = set_test_mode(net).values["tdnn1.batchnorm.count"]
    assert float(untrained) == 0.0  # a fresh model has no statistics; test mode now uses the stored ones
    out = np.asarray(set_test_mode(trained).compute(np.stack(feats)))
    assert np.isfinite(out).all()


def test_progress_in_a_log_file_is_plain_lines(monkeypatch):
    """Before: a log (no terminal) got tqdm's carriage-return frames; now a line per epoch (and every 30 s)."""
    import io

    from symnet._src.train import loop

    log, report = io.StringIO(), io.StringIO()
    monkeypatch.setattr(loop.sys, "stderr", log)
    monkeypatch.setattr(loop.sys, "stdout", report)
    monkeypatch.setattr(loop._progress, "PLAIN_SECONDS", 0.0)  # a line at every step, to see them
    rng = np.random.default_rng(0)
    feats = [rng.standard_normal((30, 4)).astype(np.float32) for _ in range(6)]
    labels = [rng.integers(0, 3, 30) for _ in range(6)]
    net = Network(LogSoftmax(Input("input", 4) @ Weight(Normal((4, 3), 0.1))))
    fit(net, (feats, labels), optax.adam(1e-2), epochs=2, batch_size=3, chunk=10, progress=True)
    text = log.getvalue() + report.getvalue()
    assert "\r" not in text
    steps, epochs = log.getvalue().splitlines(), report.getvalue().splitlines()
    assert len(steps) == 12 and all(line.startswith("step ") for line in steps)  # 6 steps an epoch, a line each
    assert steps[-1].startswith("step 12/12:")
    assert len(epochs) == 2 and epochs[-1].startswith("epoch 1: train loss") and "frames/s" in epochs[-1]
