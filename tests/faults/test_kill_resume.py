"""kill -9 at random moments: a checkpoint or model file is never torn, a killed training run resumes to
bit-identical parameters, and a checkpoint is never written by two runs at once."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from helpers import EXAMPLES

#: A campaign: `make test-all` runs it, `make test` leaves it out.
pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parents[1]
TRAIN = [
    "train",
    str(EXAMPLES / "hmm-tdnn.config"),
    "--data",
    "builtin:hmm:24",
    "--epochs",
    "4",
    "--batch-size",
    "8",
    "--chunk",
    "10",
    "--seed",
    "3",
    "--quiet",
]


def symnet(*args: str) -> subprocess.Popen:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(TESTS)}
    return subprocess.Popen(
        [sys.executable, "-m", "symnet", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def params(path: Path) -> dict[str, np.ndarray]:
    import symnet

    loaded = symnet.load(path)
    return {k: np.asarray(v) for k, v in loaded.params.items()}


def test_training_killed_at_random_moments_resumes_bit_identically(tmp_path):
    from symnet._src.train import checkpoint as ckpt
    from symnet.kaldi import read_network

    started = time.monotonic()
    status, err = finish(symnet(*TRAIN, "--out", str(tmp_path / "whole.npz")))
    assert status == 0, err
    duration = time.monotonic() - started  # a run from scratch, start-up included
    whole = params(tmp_path / "whole.npz")
    path = tmp_path / "run.ckpt"
    rng = random.Random(5)
    kills = 0
    for _ in range(3):
        proc = symnet(*TRAIN, "--out", str(tmp_path / "run.npz"), "--checkpoint", str(path))
        # a random moment within the first half of a run: a resumed run has less to do, so the
        # first two kills land before the end whatever the machine's speed
        time.sleep(rng.uniform(0.15, 0.45) * duration)
        if proc.poll() is not None:
            break  # it finished before the kill
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
        if path.exists():  # whatever the moment of the kill, the checkpoint is a whole one
            net = read_network(str(EXAMPLES / "hmm-tdnn.config"))
            import optax

            ckpt.load(str(path), net, optax.adam(2e-3).init(net.params))
    status, err = finish(symnet(*TRAIN, "--out", str(tmp_path / "run.npz"), "--checkpoint", str(path)))
    assert status == 0, err
    assert kills >= 2
    resumed = params(tmp_path / "run.npz")
    assert resumed.keys() == whole.keys()
    for name in whole:
        np.testing.assert_array_equal(resumed[name], whole[name], err_msg=name)


def test_a_second_run_on_a_checkpoint_in_use_is_refused_and_a_killed_one_blocks_nothing(tmp_path):
    from symnet._src.train.checkpoint import lock_path

    path = tmp_path / "run.ckpt"
    long = [*TRAIN[:5], "400", *TRAIN[6:]]  # 400 epochs: still running while the second one starts
    first = symnet(*long, "--out", str(tmp_path / "a.npz"), "--checkpoint", str(path))
    deadline = time.time() + 120
    while not Path(lock_path(str(path))).exists() and time.time() < deadline:
        time.sleep(0.2)
    assert first.poll() is None
    status, err = finish(symnet(*TRAIN, "--out", str(tmp_path / "b.npz"), "--checkpoint", str(path)))
    assert status == 1 and "is in use by another training run" in err and str(first.pid) in err
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert Path(lock_path(str(path))).exists()  # left by the killed run; its lock went with it
    status, err = finish(symnet(*TRAIN, "--out", str(tmp_path / "b.npz"), "--checkpoint", str(path)))
    assert status in (0, 1) and "in use" not in err  # 1: the checkpoint is of the 400-epoch run's settings


WRITER_LOOP = """
import sys
from helpers.writers import make_inputs, make_writers
from pathlib import Path
writers = make_writers(make_inputs(Path(sys.argv[2])))
writers[sys.argv[1]](sys.argv[3])  # the file exists: every kill below lands while it is being rewritten
print("ready", flush=True)
while True:
    writers[sys.argv[1]](sys.argv[3])
"""


@pytest.mark.parametrize("name", ["symnet.save", "checkpoint.save", "write_model binary", "symnet compute ark:"])
def test_a_file_being_rewritten_when_killed_is_whole(name, tmp_path):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(TESTS)}
    target = tmp_path / "out"
    rng = random.Random(name)
    versions = set()
    for _ in range(2):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER_LOOP, name, str(tmp_path / "inputs"), str(target)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.05, 1.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if target.exists():
            versions.add(_whole(name, target))
    assert versions, "the file was never whole after a kill"


def _whole(name: str, path: Path) -> int:
    """Check `path` is a complete file of the writer's kind (raises if torn); its size."""
    data = path.read_bytes()
    if name in ("symnet.save", "checkpoint.save"):
        import zipfile

        with zipfile.ZipFile(path) as z:
            assert z.testzip() is None
    elif name == "write_model binary":
        from symnet.kaldi import read_model

        read_model(path)
    else:
        import kaldiio

        assert len(dict(kaldiio.load_ark(str(path)))) == 2
    return len(data)
