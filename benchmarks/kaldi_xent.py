"""Kaldi's own cross-entropy training of an xconfig network, for a recipe's "Kaldi beside it" row.

`train(...)` does what Kaldi's steps/nnet3/train_dnn.py does with one job, on features and frame alignments given
in memory: the xconfig expanded to final.config (`symnet xconfig`, as xconfig_to_configs.py), `nnet3-init`,
`ali-to-post` of the alignments, `nnet3-get-egs` (8 frames an eg, the network's context), then each epoch
`nnet3-shuffle-egs | nnet3-merge-egs | nnet3-train` with train_dnn.py's learning rate (set by `nnet3-copy
--learning-rate`, as train_dnn.py does), decaying exponentially from 0.0015 to 0.00015 over the run, and
`--max-param-change=2`. `compute(...)` runs `nnet3-compute` (batch-norm
and dropout in test mode, the output's log-softmax) on other features. Both time themselves (wall seconds).

OpenBLAS is told the core (`kaldi_job.openblas_core`: Debian's OpenBLAS otherwise may take generic kernels) and
keeps its default threads (one per core, as symnet's XLA does).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from kaldi_job import openblas_core

FRAMES_PER_EG = 8  # train_dnn.py's --egs.frames-per-eg for a TDNN trained with cross-entropy
MINIBATCH = 256  # train_dnn.py's --trainer.optimization.minibatch-size (its default 512 halves for small data)
LEARNING_RATES = (0.0015, 0.00015)  # train_dnn.py's initial and final effective learning rates


def environment() -> dict[str, str]:
    env = dict(os.environ)
    core = openblas_core()
    if core is not None:
        env["OPENBLAS_CORETYPE"] = core
    return env


def shell(command: str, folder: Path, kaldi: Path) -> str:
    """`command` run by bash in `folder` with Kaldi's programs on PATH; its stderr (Kaldi's log)."""
    env = environment()
    env["PATH"] = f"{kaldi}:{env['PATH']}"
    out = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=folder, env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"Kaldi failed ({command}):\n{out.stderr[-3000:]}")
    return out.stderr


def write_features(path: Path, features: Mapping[str, np.ndarray]) -> None:
    import kaldiio

    kaldiio.save_ark(str(path.with_suffix(".ark")), dict(features), scp=str(path.with_suffix(".scp")))


def train(
    kaldi: Path,
    folder: Path,
    xconfig: str,
    features: Mapping[str, np.ndarray],
    labels: Mapping[str, np.ndarray],
    *,
    pdfs: int,
    context: tuple[int, int],
    epochs: int,
    seed: int = 0,
) -> tuple[Path, float, list[float]]:
    """The trained model, the wall seconds of training (egs included, the config and data files not), and each
    epoch's average objective (log-likelihood per frame) as nnet3-train logs it. `seed`: nnet3-init's `--srand`
    and, with the epoch, nnet3-shuffle-egs's."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "network.xconfig").write_text(xconfig)
    symnet = Path(sys.executable).parent / "symnet"
    subprocess.run([str(symnet), "xconfig", "network.xconfig", "-o", "final.config", "--force"], cwd=folder,
                   check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    write_features(folder / "feats", features)
    with open(folder / "ali.txt", "w") as f:
        for key in features:
            f.write(key + " " + " ".join(map(str, labels[key].tolist())) + "\n")
    shell(f"nnet3-init --srand={seed} final.config 0.raw && ali-to-post ark:ali.txt ark:post.ark", folder, kaldi)
    started = time.perf_counter()
    left, right = context
    shell(
        f"nnet3-get-egs --num-pdfs={pdfs} --num-frames={FRAMES_PER_EG} --left-context={left} "
        f"--right-context={right} scp:feats.scp ark:post.ark ark:egs.ark",
        folder,
        kaldi,
    )
    logs = train_epochs(
        folder, kaldi, epochs, LEARNING_RATES,
        lambda epoch, rate: f"nnet3-shuffle-egs --srand={1000 * seed + epoch} ark:egs.ark ark:- | "
        f"nnet3-merge-egs --minibatch-size={MINIBATCH} ark:- ark:- | "
        f"nnet3-train --use-gpu=no --max-param-change=2.0 'nnet3-copy --learning-rate={rate} {epoch}.raw - |' "
        f"ark:- {epoch + 1}.raw",
    )  # fmt: skip
    return folder / f"{epochs}.raw", time.perf_counter() - started, [average_objective(log) for log in logs]


def train_epochs(
    folder: Path, kaldi: Path, epochs: int, rates: tuple[float, float], command: Callable[[int, float], str]
) -> list[str]:
    """Each epoch's log of `command(epoch, learning rate)` (training `{epoch}.raw` into `{epoch + 1}.raw`), the
    rate decaying exponentially from `rates[0]` in the first epoch to `rates[1]` in the last, as Kaldi's
    training scripts decay it."""
    first, last = rates
    return [shell(command(e, first * (last / first) ** (e / max(epochs - 1, 1))), folder, kaldi) for e in range(epochs)]


def outputs_of(
    kaldi: Path, model: Path, folder: Path, keys: Sequence[str], features: Sequence[np.ndarray]
) -> list[np.ndarray]:
    """`compute`'s outputs for the utterances `keys` (their `features`), in that order."""
    out = compute(kaldi, model, dict(zip(keys, features)), folder)
    return [out[key] for key in keys]


def average_objective(log: str) -> float:
    """nnet3-train's "Overall average objective function for 'output' is X over N frames"."""
    for line in log.splitlines():
        if "Overall average objective function for 'output'" in line:
            return float(line.split(" is ")[1].split()[0])
    raise SystemExit(f"no objective in nnet3-train's log:\n{log[-2000:]}")


def compute(kaldi: Path, model: Path, features: Mapping[str, np.ndarray], folder: Path) -> dict[str, np.ndarray]:
    """`nnet3-compute`'s outputs (the network's log posteriors) for `features`, by key."""
    import kaldiio

    write_features(folder / "test_feats", features)
    shell(f"nnet3-compute --use-gpu=no {model} scp:test_feats.scp ark:outputs.ark", folder, kaldi)
    return {key: np.asarray(value) for key, value in kaldiio.load_ark(str(folder / "outputs.ark"))}
