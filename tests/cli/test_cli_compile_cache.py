"""`symnet compute --compile-cache` and `symnet train --compile-cache`: compiled programs kept on disk for the next
process, same output."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import kaldiio
import numpy as np
import pytest

from helpers import EXAMPLES
from symnet.kaldi import parse_network, write_model

NET = """
input-node name=input dim=3
component name=affine type=AffineComponent input-dim=9 output-dim=4
component-node name=affine component=affine input=Append(Offset(input, -1), input, Offset(input, 1))
component name=relu type=RectifiedLinearComponent dim=4
component-node name=relu component=relu input=affine
output-node name=output input=relu objective=linear
"""


@pytest.fixture()
def job(tmp_path: Path) -> Path:
    write_model(tmp_path / "nnet.raw", parse_network(NET, seed=3))
    rng = np.random.default_rng(0)
    feats = {f"utt{i}": rng.standard_normal((n, 3)).astype(np.float32) for i, n in enumerate((9, 4))}
    kaldiio.save_ark(str(tmp_path / "feats.ark"), feats)
    return tmp_path


def compute(
    folder: Path, out: str, *options: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`symnet compute` as its own process (a process compiles, or reads the cache, once per program)."""
    command = [sys.executable, "-m", "symnet", "compute", "--frames-per-chunk=4", *options]
    command += [str(folder / "nnet.raw"), f"ark:{folder / 'feats.ark'}", f"ark:{folder / out}"]
    environment = {**os.environ, **(env or {})}
    return subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300)


def outputs(path: Path) -> dict[str, np.ndarray]:
    return dict(kaldiio.load_ark(str(path)))


def entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith("-cache")) if folder.exists() else []


def plain_then_cached_twice(run: Callable[..., subprocess.CompletedProcess[str]], cache: Path, program: str) -> None:
    """`run(name, *options)` with the cache off ("plain"), then twice with `cache` ("first", "second"): the first
    writes `program`'s entry among others, the second reads every program from the cache (writes and touches none)."""
    plain = run("plain", "--compile-cache=off")
    assert plain.returncode == 0, plain.stderr
    first = run("first", f"--compile-cache={cache}")
    assert first.returncode == 0, first.stderr
    written = entries(cache)
    assert any(name.startswith(program) for name in written), written
    stamps = {name: (cache / name).stat().st_mtime_ns for name in written}
    second = run("second", f"--compile-cache={cache}")
    assert second.returncode == 0, second.stderr
    assert entries(cache) == written  # nothing new: every program came from the cache
    assert {name: (cache / name).stat().st_mtime_ns for name in written} == stamps


@pytest.mark.slow
def test_a_second_process_reads_the_programs_the_first_compiled(job: Path) -> None:
    def run(name: str, *options: str) -> subprocess.CompletedProcess[str]:
        return compute(job, f"{name}.ark", *options)

    plain_then_cached_twice(run, job / "cache", "jit_computation-")  # the network's own program
    reference = outputs(job / "plain.ark")
    for name in ("first.ark", "second.ark"):
        got = outputs(job / name)
        assert list(got) == list(reference)
        for utt, value in reference.items():
            np.testing.assert_array_equal(got[utt], value)


@pytest.mark.slow
def test_the_environment_variable_names_the_folder_and_off_writes_nothing(job: Path) -> None:
    cache = job / "from-env"
    result = compute(job, "a.ark", env={"SYMNET_COMPILE_CACHE": str(cache)})
    assert result.returncode == 0, result.stderr
    assert entries(cache)
    home = job / "xdg"
    result = compute(job, "b.ark", env={"SYMNET_COMPILE_CACHE": "off", "XDG_CACHE_HOME": str(home)})
    assert result.returncode == 0, result.stderr
    assert not home.exists()


@pytest.mark.slow
def test_an_unusable_folder_is_a_warning_and_the_output_is_the_same(job: Path) -> None:
    (job / "a-file").write_text("not a folder")
    result = compute(job, "out.ark", f"--compile-cache={job / 'a-file' / 'cache'}")
    assert result.returncode == 0, result.stderr
    assert "warning: compile cache" in result.stderr and "compiling without it" in result.stderr
    plain = compute(job, "plain.ark", "--compile-cache=off")
    assert plain.returncode == 0, plain.stderr
    reference = outputs(job / "plain.ark")
    got = outputs(job / "out.ark")
    for utt, value in reference.items():
        np.testing.assert_array_equal(got[utt], value)


SIGMOID = NET.replace("RectifiedLinearComponent", "SigmoidComponent")  # another program, same names


@pytest.mark.slow
def test_an_entry_copied_over_another_programs_name_is_ignored_and_replaced(job: Path) -> None:
    """Before: copying the ReLU network's entry over the sigmoid network's made `symnet compute` of the sigmoid
    network exit 0 with the ReLU network's outputs."""
    cache = job / "cache"
    relu = compute(job, "relu.ark", f"--compile-cache={cache}")
    assert relu.returncode == 0, relu.stderr
    relu_entries = {name for name in entries(cache) if name.startswith("jit_computation-")}
    write_model(job / "nnet.raw", parse_network(SIGMOID, seed=3))
    plain = compute(job, "plain.ark", "--compile-cache=off")
    sigmoid = compute(job, "sigmoid.ark", f"--compile-cache={cache}")
    assert plain.returncode == sigmoid.returncode == 0, sigmoid.stderr
    sigmoid_entries = {name for name in entries(cache) if name.startswith("jit_computation-")} - relu_entries
    assert sigmoid_entries and relu_entries
    planted = (cache / sorted(relu_entries)[0]).read_bytes()
    for name in sigmoid_entries:
        (cache / name).write_bytes(planted)
    again = compute(job, "again.ark", f"--compile-cache={cache}")
    assert again.returncode == 0, again.stderr
    assert "is not the one symnet stored for it" in again.stderr
    reference = outputs(job / "plain.ark")
    for utt, value in reference.items():
        np.testing.assert_array_equal(outputs(job / "again.ark")[utt], value)
    for name in sigmoid_entries:  # replaced by the fresh compilation
        assert (cache / name).read_bytes() != planted
    # every entry damaged (one byte flipped in the middle, or cut short): each is ignored and replaced
    for i, name in enumerate(sorted(entries(cache))):
        data = bytearray((cache / name).read_bytes())
        data[len(data) // 2] ^= 0xFF
        (cache / name).write_bytes(bytes(data) if i % 2 else bytes(data[: len(data) // 3]))
    damaged = compute(job, "damaged.ark", f"--compile-cache={cache}")
    assert damaged.returncode == 0, damaged.stderr
    assert "is not the one symnet stored for it" in damaged.stderr
    for utt, value in reference.items():
        np.testing.assert_array_equal(outputs(job / "damaged.ark")[utt], value)


@pytest.mark.slow
def test_a_folder_others_may_write_or_someone_else_owns_is_not_used(job: Path) -> None:
    cache = job / "shared-cache"
    cache.mkdir()
    cache.chmod(0o777)
    result = compute(job, "out.ark", f"--compile-cache={cache}")
    assert result.returncode == 0, result.stderr
    assert "others may write to it (mode 777" in result.stderr and "compiling without it" in result.stderr
    assert not entries(cache)
    if os.geteuid() == 0:  # root can give the folder away
        os.chown(cache, 12345, 12345)
        cache.chmod(0o755)
        result = compute(job, "out.ark", f"--compile-cache={cache}")
        assert "belongs to user id 12345" in result.stderr and not entries(cache)


def train(folder: Path, out: str, *options: str) -> subprocess.CompletedProcess[str]:
    """`symnet train` of the examples' HMM TDNN on the built-in task, as its own process."""
    command = [sys.executable, "-m", "symnet", "train", str(EXAMPLES / "hmm-tdnn.config"), "--data", "builtin:hmm:8"]
    command += ["--epochs", "1", "--batch-size", "4", "--chunk", "30", "--seed", "1", "--quiet", *options]
    command += ["--out", str(folder / out)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_second_training_process_reads_the_steps_the_first_compiled(tmp_path: Path) -> None:
    def run(name: str, *options: str) -> subprocess.CompletedProcess[str]:
        return train(tmp_path, f"{name}.npz", *options)

    plain_then_cached_twice(run, tmp_path / "cache", "jit_step-")  # the training step itself
    reference = np.load(tmp_path / "plain.npz")
    for name in ("first.npz", "second.npz"):
        got = np.load(tmp_path / name)
        assert sorted(got.files) == sorted(reference.files)
        for key in reference.files:
            np.testing.assert_array_equal(got[key], reference[key], err_msg=f"{name}: {key}")
