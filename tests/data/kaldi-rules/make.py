"""Make the nnet3-train fixture of tests/train/test_kaldi_rules.py (needs Kaldi's nnet3-init, nnet3-copy and
nnet3-train on PATH: ../shared/kaldi-bin.tar.xz, see shared/KALDI-BUILD.md; run from this folder).

A small network with per-component max-change, l2-regularize, a learning-rate-factor and orthonormal
constraints (floating and fixed; one on a matrix with more rows than columns) and a training-mode batch-norm,
with natural gradient off (TdnnComponents with use-natural-gradient=false: Kaldi's LinearComponent
preconditions its gradient whatever its use-natural-gradient says),
trained for STEPS minibatches by nnet3-train, one call per minibatch (so each call's ConstrainOrthonormal
draw is seen alone): step{k}.txt is the model after k minibatches (step0.txt as `nnet3-copy
--learning-rate=0.05` leaves it), eg{k}.txt the minibatch of step k: SEQUENCES chunks of FRAMES frames
with one frame of context on each side, as nnet3-merge-egs would merge them (n = 0, 1, ...).
"""

from __future__ import annotations

import subprocess

import numpy as np

STEPS, SEQUENCES, FRAMES, DIM, PDFS = 4, 2, 4, 4, 5
CONFIG = """input-node name=input dim=4
component name=tdnn1 type=TdnnComponent input-dim=4 output-dim=6 time-offsets=-1,0,1 max-change=0.2 l2-regularize=0.05 learning-rate-factor=0.5 use-natural-gradient=false
component-node name=tdnn1 component=tdnn1 input=input
component name=relu1 type=RectifiedLinearComponent dim=6
component-node name=relu1 component=relu1 input=tdnn1
component name=bn1 type=BatchNormComponent dim=6
component-node name=bn1 component=bn1 input=relu1
component name=lin type=TdnnComponent input-dim=6 output-dim=3 time-offsets=0 use-bias=false orthonormal-constraint=-1.0 l2-regularize=0.02 max-change=0.3 use-natural-gradient=false
component-node name=lin component=lin input=bn1
component name=aff type=AffineComponent input-dim=3 output-dim=5 orthonormal-constraint=1.0 max-change=0.5
component-node name=aff component=aff input=lin
component name=sm type=LogSoftmaxComponent dim=5
component-node name=sm component=sm input=aff
output-node name=output input=sm objective=linear
"""  # noqa: E501


def matrix(rows: np.ndarray) -> str:
    return " [\n" + "\n".join("  " + " ".join(f"{v:.6f}" for v in row) for row in rows) + " ]\n"


def eg(rng: np.random.Generator, k: int) -> str:
    """One merged minibatch in Kaldi's text form: input rows (n, t) for t = -1 .. FRAMES, n-major."""
    inputs, outputs, feats, labels = [], [], [], []
    for n in range(SEQUENCES):
        x = rng.normal(size=(FRAMES, DIM))
        padded = np.concatenate([x[:1], x, x[-1:]])  # nnet3-get-egs repeats the edge frames
        inputs += [f"<I1> {n} {t} 0" for t in range(-1, FRAMES + 1)]
        feats.append(padded)
        outputs += [f"<I1> {n} {t} 0" for t in range(FRAMES)]
        labels += list(rng.integers(0, PDFS, size=FRAMES))
    io_in = f"<NnetIo> input <I1V> {len(inputs)} {' '.join(inputs)} " + matrix(np.concatenate(feats)).lstrip()
    posts = " ".join(f"dim={PDFS} [ {int(p)} 1 ]" for p in labels)
    io_out = f"<NnetIo> output <I1V> {len(outputs)} {' '.join(outputs)} rows={len(labels)} {posts} \n"
    return f"eg{k} <Nnet3Eg> <NumIo> 2 {io_in}</NnetIo> {io_out}</NnetIo> </Nnet3Eg> \n"


def run(*args: str) -> None:
    subprocess.run(args, check=True, stderr=subprocess.DEVNULL)


def main() -> None:
    rng = np.random.default_rng(26)
    with open("net.config", "w") as f:
        f.write(CONFIG)
    run("nnet3-init", "--srand=1", "net.config", "init.raw")
    run("nnet3-copy", "--binary=false", "--learning-rate=0.05", "init.raw", "step0.txt")
    for k in range(1, STEPS + 1):
        with open(f"eg{k}.txt", "w") as f:
            f.write(eg(rng, k))
        run(
            "nnet3-train",
            "--use-gpu=no",
            f"--srand={k}",
            "--max-param-change=0.4",
            f"step{k - 1}.txt",
            f"ark,t:eg{k}.txt",
            "next.raw",
        )
        run("nnet3-copy", "--binary=false", "next.raw", f"step{k}.txt")
    for scratch in ("init.raw", "next.raw"):
        subprocess.run(["rm", "-f", scratch], check=True)


if __name__ == "__main__":
    main()
