"""Kaldi's own chain training of an xconfig network, for a recipe's "Kaldi beside it" row.

`train(...)` makes what Kaldi's chain recipe makes, with one job, from features and phone lengths given in memory
(as tests/data/chain-chunks/make.sh does): Kaldi's chain topology for the phones, `gmm-init-mono` (a monophone
tree and transition model: 2 pdfs a phone), `chain-est-phone-lm --num-extra-lm-states=2000`,
`chain-make-den-fst` (den.fst and normalization.fst), `chain-get-supervision` at frame subsampling 3,
`nnet3-chain-get-egs` (the normalization FST composed in, the network's context), the xconfig expanded by
`symnet xconfig` and `nnet3-init`; then each epoch `nnet3-chain-shuffle-egs | nnet3-chain-merge-egs |
nnet3-chain-train` (`--xent-regularize`, `--leaky-hmm-coefficient`, `--max-param-change=2`) with the learning
rate set by `nnet3-copy --learning-rate`, decaying exponentially from 0.002 to 0.0002 (the mini_librispeech
recipe's effective rates). `kaldi_xent.compute` runs the trained model.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from kaldi_xent import shell, train_epochs, write_features

LEARNING_RATES = (0.002, 0.0002)
MINIBATCH = 64


def topology(phones: int) -> str:
    """steps/nnet3/chain/gen_topo.py's topology for phones 1 to `phones`."""
    ids = " ".join(str(p) for p in range(1, phones + 1))
    return (
        f"<Topology>\n<TopologyEntry>\n<ForPhones>\n{ids}\n</ForPhones>\n"
        "<State> 0 <ForwardPdfClass> 0 <SelfLoopPdfClass> 1 <Transition> 0 0.5 <Transition> 1 0.5 </State>\n"
        "<State> 1 </State>\n</TopologyEntry>\n</Topology>\n"
    )


def train(
    kaldi: Path,
    folder: Path,
    xconfig: str,
    features: Mapping[str, np.ndarray],
    phone_lengths: Mapping[str, np.ndarray],
    *,
    phones: int,
    context: tuple[int, int],
    epochs: int,
    num_frames: str,
    xent_regularize: float,
    leaky_hmm_coefficient: float,
    seed: int = 0,
) -> tuple[Path, float, list[float]]:
    """The trained model, the wall seconds of training (phone LM, graphs, supervision and egs included; the
    config and data files not), and each epoch's average chain objective as nnet3-chain-train logs it. `seed`:
    nnet3-init's `--srand` and, with the epoch, nnet3-chain-shuffle-egs's."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "network.xconfig").write_text(xconfig)
    (folder / "chain.topo").write_text(topology(phones))
    symnet = Path(sys.executable).parent / "symnet"
    subprocess.run([str(symnet), "xconfig", "network.xconfig", "-o", "final.config", "--force"], cwd=folder,
                   check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    write_features(folder / "feats", features)
    with open(folder / "lengths.txt", "w") as lengths, open(folder / "phones.txt", "w") as sequences:
        for key in features:
            pairs = phone_lengths[key]
            lengths.write(key + " " + " ; ".join(f"{p} {n}" for p, n in pairs.tolist()) + "\n")
            sequences.write(key + " " + " ".join(str(p) for p in pairs[:, 0].tolist()) + "\n")
    dim = features_dim(features)
    shell(f"nnet3-init --srand={seed} final.config 0.raw && gmm-init-mono chain.topo {dim} 0.mdl tree", folder, kaldi)
    started = time.perf_counter()
    left, right = context
    shell(
        "chain-est-phone-lm --num-extra-lm-states=2000 ark:phones.txt lm.fst && "
        "chain-make-den-fst tree 0.mdl lm.fst den.fst normalization.fst && "
        "chain-get-supervision --frame-subsampling-factor=3 tree 0.mdl ark:lengths.txt ark:sup.ark && "
        f"nnet3-chain-get-egs --frame-subsampling-factor=3 --num-frames={num_frames} --left-context={left} "
        f"--right-context={right} normalization.fst scp:feats.scp ark:sup.ark ark:cegs.ark",
        folder,
        kaldi,
    )
    objectives = train_on_egs(
        kaldi, folder, epochs, egs=folder / "cegs.ark", den=folder / "den.fst", seed=seed,
        xent_regularize=xent_regularize, leaky_hmm_coefficient=leaky_hmm_coefficient,
    )  # fmt: skip
    return folder / f"{epochs}.raw", time.perf_counter() - started, objectives


def train_on_egs(
    kaldi: Path,
    folder: Path,
    epochs: int,
    *,
    egs: Path,
    den: Path,
    seed: int,
    xent_regularize: float,
    leaky_hmm_coefficient: float,
) -> list[float]:
    """Kaldi's training of FOLDER/0.raw on chain egs `egs` with `den`, an nnet3-chain-train job per epoch (the
    recipe's schedule) into FOLDER/1.raw ... FOLDER/{epochs}.raw: each epoch's average chain objective. `seed`
    with the epoch is nnet3-chain-shuffle-egs's `--srand`."""
    egs, den = egs.resolve(), den.resolve()  # the jobs run in `folder`
    logs = train_epochs(
        folder, kaldi, epochs, LEARNING_RATES,
        lambda epoch, rate: f"nnet3-chain-shuffle-egs --srand={1000 * seed + epoch} ark:{egs} ark:- | "
        f"nnet3-chain-merge-egs --minibatch-size={MINIBATCH} ark:- ark:- | "
        f"nnet3-chain-train --use-gpu=no --max-param-change=2.0 --xent-regularize={xent_regularize} "
        f"--leaky-hmm-coefficient={leaky_hmm_coefficient} "
        f"'nnet3-copy --learning-rate={rate} {epoch}.raw - |' {den} ark:- {epoch + 1}.raw",
    )  # fmt: skip
    return [chain_objective(log) for log in logs]


def features_dim(features: Mapping[str, np.ndarray]) -> int:
    return int(next(iter(features.values())).shape[1])


def chain_objective(log: str) -> float:
    """nnet3-chain-train's "Overall average objective function for 'output' is X + Y = Z over N frames": X."""
    for line in log.splitlines():
        if "Overall average objective function for 'output'" in line:
            return float(line.split(" is ")[1].split()[0])
    raise SystemExit(f"no objective in nnet3-chain-train's log:\n{log[-2000:]}")
