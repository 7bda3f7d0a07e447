"""Make the nnet3-train fixtures of tests/train/test_kaldi_rules.py (needs Kaldi's nnet3-init, nnet3-copy and
nnet3-train on PATH: ../shared/kaldi-bin.tar.xz, see shared/KALDI-BUILD.md; run from this folder): this
folder's, and ../kaldi-ng's (`NATURAL_CONFIG`, below).

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
from pathlib import Path

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


#: ../kaldi-ng: natural gradient on, as Kaldi trains each kind that has it (TdnnComponent with and without a bias,
#: over its spliced input; LinearComponent, which preconditions whatever its use-natural-gradient says;
#: NaturalGradientAffineComponent), with Kaldi's default ranks. nnet3-train starts each call's preconditioners
#: afresh (they are not in the model file), so each minibatch is the first of its preconditioners: Kaldi's Init.
NATURAL_CONFIG = """input-node name=input dim=4
component name=tdnn1 type=TdnnComponent input-dim=4 output-dim=6 time-offsets=-1,0,1
component-node name=tdnn1 component=tdnn1 input=input
component name=relu1 type=RectifiedLinearComponent dim=6
component-node name=relu1 component=relu1 input=tdnn1
component name=tdnn2 type=TdnnComponent input-dim=6 output-dim=5 time-offsets=0 use-bias=false
component-node name=tdnn2 component=tdnn2 input=relu1
component name=lin type=LinearComponent input-dim=5 output-dim=4 use-natural-gradient=false
component-node name=lin component=lin input=tdnn2
component name=aff type=NaturalGradientAffineComponent input-dim=4 output-dim=5
component-node name=aff component=aff input=lin
component name=sm type=LogSoftmaxComponent dim=5
component-node name=sm component=sm input=aff
output-node name=output input=sm objective=linear
"""


def matrix(rows: np.ndarray) -> str:
    return " [\n" + "\n".join("  " + " ".join(f"{v:.6f}" for v in row) for row in rows) + " ]\n"


def eg(rng: np.random.Generator, k: int, sequences: int = SEQUENCES, frames: int = FRAMES) -> str:
    """One merged minibatch in Kaldi's text form: input rows (n, t) for t = -1 .. frames, n-major."""
    inputs, outputs, feats, labels = [], [], [], []
    for n in range(sequences):
        x = rng.normal(size=(frames, DIM))
        padded = np.concatenate([x[:1], x, x[-1:]])  # nnet3-get-egs repeats the edge frames
        inputs += [f"<I1> {n} {t} 0" for t in range(-1, frames + 1)]
        feats.append(padded)
        outputs += [f"<I1> {n} {t} 0" for t in range(frames)]
        labels += list(rng.integers(0, PDFS, size=frames))
    io_in = f"<NnetIo> input <I1V> {len(inputs)} {' '.join(inputs)} " + matrix(np.concatenate(feats)).lstrip()
    posts = " ".join(f"dim={PDFS} [ {int(p)} 1 ]" for p in labels)
    io_out = f"<NnetIo> output <I1V> {len(outputs)} {' '.join(outputs)} rows={len(labels)} {posts} \n"
    return f"eg{k} <Nnet3Eg> <NumIo> 2 {io_in}</NnetIo> {io_out}</NnetIo> </Nnet3Eg> \n"


def run(*args: str) -> None:
    subprocess.run(args, check=True, stderr=subprocess.DEVNULL)


def make(folder: Path, config: str, seed: int, max_param_change: float, sequences: int, frames: int) -> None:
    rng = np.random.default_rng(seed)
    (folder / "net.config").write_text(config)
    run("nnet3-init", "--srand=1", str(folder / "net.config"), "init.raw")
    run("nnet3-copy", "--binary=false", "--learning-rate=0.05", "init.raw", str(folder / "step0.txt"))
    for k in range(1, STEPS + 1):
        (folder / f"eg{k}.txt").write_text(eg(rng, k, sequences, frames))
        run(
            "nnet3-train",
            "--use-gpu=no",
            f"--srand={k}",
            f"--max-param-change={max_param_change}",
            str(folder / f"step{k - 1}.txt"),
            f"ark,t:{folder / f'eg{k}.txt'}",
            "next.raw",
        )
        run("nnet3-copy", "--binary=false", "next.raw", str(folder / f"step{k}.txt"))
    for scratch in ("init.raw", "next.raw"):
        Path(scratch).unlink(missing_ok=True)


def main() -> None:
    make(Path("."), CONFIG, 26, 0.4, SEQUENCES, FRAMES)
    natural = Path("../kaldi-ng")
    natural.mkdir(exist_ok=True)
    make(natural, NATURAL_CONFIG, 27, 100.0, 3, 16)  # more rows than any preconditioner's dimension


if __name__ == "__main__":
    main()
