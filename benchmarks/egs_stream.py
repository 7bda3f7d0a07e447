"""Kaldi egs archives streamed into `fit` (`symnet.train.stream_egs`): examples per second indexed and read, and
the share of step time `fit` spends waiting for them.

    python benchmarks/egs_stream.py --egs 2000 --frames 150 --dim 40 --steps 40

Writes an archive of `--egs` examples as nnet3-get-egs writes them (`--frames` output frames, 16 frames of
context each side, `--dim`-dim features, 2,000 pdfs), uncompressed (FM) and compressed (CM), then for each:
the examples per second of the index pass (every example read and checked once, when the stream is made) and of
reading every example by its offset as `fit`'s reading thread does (best of three); and, with `--steps`,
trains a TDNN of two 256-wide layers (`fit` on the stream, minibatches of 64) and reports the share of step
time spent waiting for input
(`StepStats.waited`; the first step, which compiles, left out).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_model

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from helpers import nets
from helpers.egs_bytes import write_egs

CONTEXT, PDFS = 16, 2000


def rates(path: Path, count: int) -> tuple[float, float]:
    """Examples per second: the index pass, and reading every example by offset (best of three each)."""
    from symnet.train import stream_egs

    index = read = 0.0
    for _ in range(3):
        start = time.perf_counter()
        stream = stream_egs(str(path))
        index = max(index, count / (time.perf_counter() - start))
        start = time.perf_counter()
        for _ in stream.read(range(len(stream))):
            pass
        read = max(read, count / (time.perf_counter() - start))
    return index, read


def waited(path: Path, dim: int, steps: int) -> float:
    """The share of `fit`'s step time spent waiting for a minibatch of the stream."""
    import optax

    from symnet import Input
    from symnet.train import fit, stream_egs

    net = nets.tdnn(Input("input", dim), hidden=256, out=PDFS, log_softmax=True)
    stats: list = []
    fit(net, stream_egs(str(path)), optax.adam(1e-3), batch_size=64, max_steps=steps, progress=False,
        on_step=stats.append)  # fmt: skip
    stats = stats[1:]
    return sum(s.waited for s in stats) / sum(s.seconds for s in stats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--egs", type=int, default=2000)
    parser.add_argument("--frames", type=int, default=150)
    parser.add_argument("--dim", type=int, default=40)
    parser.add_argument("--steps", type=int, default=0, help="train this many steps for the waiting share (0: no)")
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}; {args.egs} egs of {args.frames} frames x {args.dim} dims, context {CONTEXT}")
    with tempfile.TemporaryDirectory() as folder:
        for compress in (False, True):
            path = Path(folder) / f"egs-{'cm' if compress else 'fm'}.ark"
            write_egs(path, [args.frames] * args.egs, dim=args.dim, num_pdfs=PDFS, left=CONTEXT, right=CONTEXT,
                      compress=compress)  # fmt: skip
            index, read = rates(path, args.egs)
            line = f"{'CM' if compress else 'FM'} {path.stat().st_size / 1e6:.0f} MB: index {index:,.0f} egs/s, "
            line += f"read {read:,.0f} egs/s"
            if args.steps:
                line += f", fit waited {waited(path, args.dim, args.steps):.1%} of its step time"
            print(line, flush=True)


if __name__ == "__main__":
    main()
