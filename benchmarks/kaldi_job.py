"""The real job: `symnet compute` (the CLI, process start and compilation included) on 200 utterances.

The network is the Kaldi corpus's 6-layer 512-wide TDNN (`perf/tdnn6x512.config`
in `kaldi-oracle-dev.tar.xz`, read from the tarball, never copied into the
repository), with random batch-norm statistics (count 1) as in the corpus's
PERF.md. The job is 200 utterances of 100 to 1,500 frames (uniform, seeded)
of 40-dim N(0, 1) features, nnet3-compute's default options (50-frame chunks)
and one chunk per utterance (`--frames-per-chunk=3000`), run on one thread
(`taskset` to one core, XLA's CPU thread pool off) and on all threads. Frames
per second are printed beside Kaldi's nnet3-compute figures from PERF.md.

    python benchmarks/kaldi_job.py [--corpus ../shared/kaldi-oracle-dev.tar.xz | --config tdnn6x512.config]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import attrs
import kaldiio
import numpy as np

REPO = Path(__file__).resolve().parents[1]
MEMBER = "perf/tdnn6x512.config"
#: Kaldi nnet3-compute on 20 x 500 frames, one thread (PERF.md, median wall): one chunk per utterance, 50-frame chunks.
KALDI_FPS = {3000: 6645, 50: 5479}


def default_corpus() -> Path:
    """`shared/kaldi-oracle-dev.tar.xz` in the nearest ancestor of the repository that has one."""
    for folder in REPO.parents:
        candidate = folder / "shared" / "kaldi-oracle-dev.tar.xz"
        if candidate.exists():
            return candidate
    return REPO.parent / "shared" / "kaldi-oracle-dev.tar.xz"


def config_text(corpus: Path) -> bytes:
    with tarfile.open(corpus) as tar:
        for member in tar.getmembers():
            if member.name.endswith(MEMBER):
                handle = tar.extractfile(member)
                if handle is not None:
                    return handle.read()
    raise SystemExit(f"{corpus} has no {MEMBER}")


def write_model(config: Path, path: Path, seed: int = 0) -> None:
    """The network of `config` with random batch-norm statistics, as a Kaldi model file."""
    from symnet.kaldi.build import read_network
    from symnet.kaldi.model import write_model as write_kaldi

    kaldi = read_network(str(config), seed=seed)
    rng = np.random.default_rng(seed)
    values = {}
    for name, value in kaldi.network.state.items():
        if name.endswith(".count"):
            values[name] = np.ones_like(np.asarray(value))
        elif name.endswith(".stats_mean"):
            values[name] = rng.normal(0, 0.1, np.shape(value)).astype(np.float32)
    for name, value in kaldi.network.state.items():
        if name.endswith(".stats_var"):
            mean = values[name.replace(".stats_var", ".stats_mean")]
            values[name] = (mean**2 + rng.uniform(0.5, 1.5, np.shape(value))).astype(np.float32)
    kaldi = attrs.evolve(kaldi, network=kaldi.network.assign(values))
    write_kaldi(path, kaldi, raw=True)


def write_features(path: Path, count: int, low: int, high: int, seed: int = 0) -> int:
    """`count` utterances of `low`..`high` frames as a Kaldi binary archive; the total number of frames."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(low, high + 1, size=count)
    with kaldiio.WriteHelper(f"ark:{path}") as writer:
        for i, length in enumerate(lengths):
            writer(f"utt{i:04d}", rng.standard_normal((int(length), 40)).astype(np.float32))
    return int(lengths.sum())


def run(model: Path, feats: Path, frames_per_chunk: int, one_thread: bool) -> float:
    """Wall seconds of one `symnet compute` process."""
    env = dict(os.environ)
    script = Path(sys.executable).with_name("symnet")
    command = [
        str(script),
        "compute",
        f"--frames-per-chunk={frames_per_chunk}",
        str(model),
        f"ark:{feats}",
        "ark:/dev/null",
    ]
    if one_thread:
        env["XLA_FLAGS"] = (
            env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
        ).strip()
        env["OPENBLAS_NUM_THREADS"] = env["OMP_NUM_THREADS"] = "1"
        if shutil.which("taskset"):
            command = ["taskset", "-c", "0", *command]
    start = time.perf_counter()
    subprocess.run(command, check=True, env=env, cwd=REPO, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=None, help="kaldi-oracle-dev.tar.xz (default: ../shared)")
    parser.add_argument("--config", type=Path, default=None, help="tdnn6x512.config itself, instead of the tarball")
    parser.add_argument("--utterances", type=int, default=200)
    parser.add_argument("--min-frames", type=int, default=100)
    parser.add_argument("--max-frames", type=int, default=1500)
    parser.add_argument("--chunks", type=int, nargs="+", default=[50, 3000], help="--frames-per-chunk values")
    parser.add_argument("--threads", choices=["one", "all", "both"], default="both")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        config = args.config
        if config is None:
            config = folder / "tdnn6x512.config"
            config.write_bytes(config_text(args.corpus or default_corpus()))
        model, feats = folder / "model.raw", folder / "feats.ark"
        write_model(config, model)
        frames = write_features(feats, args.utterances, args.min_frames, args.max_frames)
        print(f"{args.utterances} utterances, {frames} frames, {args.min_frames}-{args.max_frames} frames each")
        print("| threads | --frames-per-chunk | wall (s) | symnet frames/s | Kaldi frames/s (1 thread) | ratio |")
        print("|---|---|---|---|---|---|")
        modes = {"one": [True], "all": [False], "both": [True, False]}[args.threads]
        for one_thread in modes:
            for chunk in args.chunks:
                wall = run(model, feats, chunk, one_thread)
                kaldi = KALDI_FPS.get(chunk)
                ratio = f"{frames / wall / kaldi:.2f}" if kaldi else "-"
                print(
                    f"| {'1' if one_thread else 'all'} | {chunk} | {wall:.2f} | {frames / wall:.0f} | "
                    f"{kaldi or '-'} | {ratio} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
