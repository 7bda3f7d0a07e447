"""A checkpoint resumes only the run that wrote it: what defines the run is recorded and a mismatch is
refused naming the field (unless allowed); its fields are checked; a second writer is locked out; the
checkpoint path is checked before any training."""

from __future__ import annotations

import json
import os
import pathlib
import zipfile

import numpy as np
import optax
import pytest

from helpers import fuzz, nets
from symnet import Input, Network
from symnet._src.train import checkpoint as ckpt
from symnet._src.train import loop
from symnet.datasets import HmmTask
from symnet.errors import OutputError
from symnet.train import CheckpointError, TrainingError, fit

FEAT, CLASSES = 4, 6


def tdnn(seed: int = 0) -> Network:
    """Context (1, 1): a hidden layer with a bias (stddev 1 / sqrt(fan-in)), an output layer without."""
    return nets.tdnn(
        Input("input", FEAT), hidden=8, out=CLASSES, second=(0,), names=("l1.w", "out.w"), scale=(None, 0.3),
        bias=("l1.b", False), log_softmax=True, seed=seed,
    )  # fmt: skip


@pytest.fixture(scope="module")
def data():
    task = HmmTask.create(
        seed=0, num_phones=3, successors=2, states_per_phone=2, feat_dim=FEAT, min_length=20, max_length=40
    )
    return task.sample(8, seed=1), task.sample(8, seed=5)


def run(train, **kw):
    kw = {"epochs": 1, "batch_size": 3, "chunk": 7, "progress": False, **kw}
    return fit(tdnn(), train, optax.adam(1e-2), **kw)


@pytest.mark.parametrize(
    "change,field",
    [
        ({"batch_size": 4}, "batch_size"),
        ({"chunk": 5}, "chunk"),
        ({"seed": 9}, "seed"),
        ({"run": {"lr": 0.1}}, "lr"),
        ({"run": {"lr": 0.01, "optimizer": "sgd"}}, "optimizer"),
    ],
)
def test_a_resume_with_other_settings_is_refused_naming_the_field(data, tmp_path, change, field):
    """Before: batch size 16 -> 64 silently skipped half an epoch."""
    train, _ = data
    path = str(tmp_path / "c.npz")
    run(train, checkpoint=path, run={"lr": 0.01})
    before = (tmp_path / "c.npz").read_bytes()
    settings = {"run": {"lr": 0.01}, **change}
    with pytest.raises(CheckpointError, match=rf"saved by a run with other settings \({field}: saved") as e:
        run(train, epochs=2, checkpoint=path, **settings)
    assert f"allow_changes=('{field}',)" in str(e.value) and f"--allow-changes {field}" in str(e.value)
    assert (tmp_path / "c.npz").read_bytes() == before


def test_other_data_is_refused(data, tmp_path):
    train, other = data
    path = str(tmp_path / "c.npz")
    run(train, checkpoint=path)
    with pytest.raises(CheckpointError, match=r"data: saved digest \w+, now digest \w+"):
        run(other, epochs=2, checkpoint=path)


def test_an_allowed_change_resumes_at_an_epoch_boundary(data, tmp_path):
    train, _ = data
    path = str(tmp_path / "c.npz")
    run(train, checkpoint=path, run={"lr": 0.01})
    resumed = run(train, epochs=2, batch_size=4, checkpoint=path, run={"lr": 0.005}, allow_changes=("batch_size", "lr"))
    assert [h.epoch for h in resumed.history] == [0, 1]


def test_a_mid_epoch_checkpoint_keeps_its_batch_size_even_when_allowed(data, tmp_path):
    train, _ = data
    path = str(tmp_path / "c.npz")
    run(train, epochs=1, checkpoint=path, checkpoint_every=2, max_steps=2)
    with pytest.raises(CheckpointError, match="in the middle of epoch 0 .* depends on batch_size"):
        run(train, epochs=1, batch_size=4, checkpoint=path, checkpoint_every=2, allow_changes=("batch_size",))
    with pytest.raises(CheckpointError, match="not fields of this run"):
        run(train, checkpoint=path, allow_changes=("nonsense",))


def test_the_same_settings_resume_as_before(data, tmp_path):
    train, _ = data
    whole = run(train, epochs=2)
    path = str(tmp_path / "c.npz")
    run(train, epochs=2, checkpoint=path, checkpoint_every=3, max_steps=4)
    resumed = run(train, epochs=2, checkpoint=path, checkpoint_every=3)
    for name, value in whole.network.params.items():
        np.testing.assert_array_equal(np.asarray(resumed.network.params[name]), np.asarray(value))


def test_a_second_writer_is_locked_out(data, tmp_path):
    """Before: two runs on one checkpoint path mixed silently."""
    train, _ = data
    path = str(tmp_path / "c.npz")
    with ckpt.lock(path):
        with pytest.raises(CheckpointError, match="is in use by another training run"):
            run(train, checkpoint=path)
    run(train, checkpoint=path)  # released
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.npz"]  # the lock file went with the run


def test_a_link_planted_at_the_lock_path_is_refused_and_its_target_untouched(data, tmp_path):
    """Before: a symlink at `.NAME.lock` made the run truncate its target, write a PID into it and remove the
    link (as root: any file on the machine)."""
    train, _ = data
    path = str(tmp_path / "c.npz")
    victim = tmp_path / "victim"
    victim.write_text("precious")
    os.symlink(victim, ckpt.lock_path(path))
    with pytest.raises(CheckpointError, match=r"its lock file .*\.c\.npz\.lock is a symbolic link"):
        run(train, checkpoint=path)
    assert victim.read_text() == "precious" and os.path.islink(ckpt.lock_path(path))
    os.unlink(ckpt.lock_path(path))
    os.mkfifo(ckpt.lock_path(path))  # a FIFO neither blocks the run nor is written
    with pytest.raises(CheckpointError, match="is not a regular file"):
        run(train, checkpoint=path)


def test_a_lock_file_replaced_during_the_run_is_not_removed(tmp_path):
    """The run removes only the lock file it made, not one that took its name since."""
    path = str(tmp_path / "c.npz")
    with ckpt.lock(path):
        os.unlink(ckpt.lock_path(path))
        pathlib.Path(ckpt.lock_path(path)).write_text("someone else's")
    assert pathlib.Path(ckpt.lock_path(path)).read_text() == "someone else's"


def test_a_lock_file_that_was_there_is_locked_but_left_alone(data, tmp_path):
    """Before: a regular `.NAME.lock` already there (a hard link to another file, say) was truncated, given the
    run's PID and removed. Now it is locked as it is: a second run is still refused, the file is never written."""
    train, _ = data
    path = str(tmp_path / "c.npz")
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    os.link(victim, ckpt.lock_path(path))
    with ckpt.lock(path):
        with pytest.raises(CheckpointError, match="is in use by another training run"):
            run(train, checkpoint=path)
        assert victim.read_text() == "precious\n"
    run(train, checkpoint=path, max_steps=2)
    assert victim.read_text() == "precious\n" and os.path.samefile(victim, ckpt.lock_path(path))


def test_temporary_files_a_killed_run_left_are_removed_on_the_next_run(data, tmp_path):
    """Before: a kill -9 while a checkpoint was being written left `.NAME.XXXXXXXX.tmp` beside it for good. Only
    names of that exact pattern, regular files of this user, are removed."""
    train, _ = data
    path = str(tmp_path / "c.npz")
    stale = [tmp_path / ".c.npz.k1_9zq0a.tmp", tmp_path / ".c.npz.abcdefgh.tmp"]
    kept = [tmp_path / ".c.npz.abc.tmp", tmp_path / ".c.npz.ABCDEFGH.tmp", tmp_path / ".d.npz.abcdefgh.tmp"]
    kept += [tmp_path / "c.npz.abcdefgh.tmp", tmp_path / ".c.npz.abcdefgh.tmp.keep"]
    for p in stale + kept:
        p.write_bytes(b"half a checkpoint")
    (tmp_path / "victim").write_text("precious")
    link = tmp_path / ".c.npz.linkxxxx.tmp"
    link.symlink_to(tmp_path / "victim")
    run(train, checkpoint=path, max_steps=2)
    assert not any(p.exists() for p in stale)
    assert all(p.exists() for p in kept) and link.is_symlink() and (tmp_path / "victim").read_text() == "precious"


def test_the_checkpoint_path_is_checked_before_training(data, tmp_path, monkeypatch):
    """Before: a typo in the path showed after the whole run."""
    train, _ = data
    (tmp_path / "file").write_bytes(b"")
    monkeypatch.setattr(loop, "Trainer", lambda *a, **k: pytest.fail("training started"))
    for bad in ("file/c.npz", "."):
        with pytest.raises(OutputError):
            run(train, checkpoint=str(tmp_path / bad))


def _rewrite(path, **changes) -> None:
    """Rewrite checkpoint `path` with members replaced (`header=dict` for the JSON header)."""
    with zipfile.ZipFile(path) as z:
        members = {info.filename[:-4]: z.read(info) for info in z.infolist()}
    for name, value in changes.items():
        members[name] = fuzz.json_member(value) if name == "header" else value
    (path).write_bytes(fuzz.npz_bytes(members))


def _header(path) -> dict:
    with np.load(path) as f:
        return json.loads(f["header"].tobytes())


@pytest.mark.parametrize(
    "position,message",
    [
        ({"step": -1, "epoch": 0, "batch": 0}, "step is -1"),
        ({"step": 1, "epoch": "0", "batch": 0}, "epoch is '0'"),
        ({"step": 1, "epoch": 0, "batch": 1.5}, "batch is 1.5"),
        ({"step": 1, "epoch": 0}, "expected step, epoch"),
        ({"step": 1, "epoch": 0, "batch": 99}, "an epoch of this run has"),
    ],
)
def test_crafted_positions_are_refused(data, tmp_path, position, message):
    train, _ = data
    path = tmp_path / "c.npz"
    run(train, checkpoint=str(path))
    _rewrite(path, header={**_header(path), "position": position})
    with pytest.raises(CheckpointError, match=message):
        run(train, epochs=2, checkpoint=str(path))


def test_crafted_dtypes_and_unreferenced_members_are_refused(data, tmp_path):
    train, _ = data
    path = tmp_path / "c.npz"
    run(train, checkpoint=str(path))
    good = path.read_bytes()
    _rewrite(path, **{"param/l1.b": fuzz.npy_bytes(np.zeros(8, np.float64))})
    with pytest.raises(CheckpointError, match=r"member 'param/l1.b' has dtype float64, expected float32"):
        run(train, epochs=2, checkpoint=str(path))
    path.write_bytes(good)
    _rewrite(
        path, junk=fuzz.npy_bytes(header={"descr": "<f4", "fortran_order": False, "shape": (3 << 28,)}, data=b"\0" * 8)
    )
    with pytest.raises(CheckpointError, match=r"members \['junk'\] belong to no parameter"):
        run(train, epochs=2, checkpoint=str(path))
    path.write_bytes(good)
    _rewrite(path, header={**_header(path), "extra": {"history": [{"epoch": "x"}]}})
    with pytest.raises(CheckpointError, match="entry 0 of the header's history"):
        run(train, epochs=2, checkpoint=str(path))


def test_a_version_1_checkpoint_resumes_with_a_warning(data, tmp_path):
    train, _ = data
    path = tmp_path / "c.npz"
    run(train, checkpoint=str(path))
    header = _header(path)
    del header["run"]
    _rewrite(path, header={**header, "version": 1})
    with pytest.warns(UserWarning, match="version-1 checkpoint"):
        run(train, epochs=2, checkpoint=str(path))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"seed": -1}, "seed must be an integer >= 0"),
        ({"seed": 1.5}, "seed must be"),
        ({"batch_size": "8"}, "batch_size"),
        ({"objective": 3}, "objective must be a string"),
        ({"checkpoint": 5}, "checkpoint must be a file path"),
        ({"max_steps": "3"}, "max_steps"),
        ({"on_epoch": 3}, "on_epoch"),
        ({"run": [1]}, "run must be a mapping"),
        ({"allow_changes": "lr"}, "allow_changes must be a sequence"),
        ({"input": None}, "input must be a string"),
    ],
)
def test_fit_arguments_of_the_wrong_type_are_training_errors(data, kwargs, message):
    train, _ = data
    with pytest.raises(TrainingError, match=message):
        run(train, **kwargs)


def test_fit_refuses_what_is_not_a_network_or_an_optimizer(data):
    train, _ = data
    with pytest.raises(TrainingError, match="trains a symnet Network"):
        fit("net", train, optax.adam(1e-2))
    with pytest.raises(TrainingError, match="optax GradientTransformation"):
        fit(tdnn(), train, 0.01)
