"""Reading a Kaldi text archive (`ark,t:`): symnet's checked reader against kaldiio on the same file.

The archive is written here (`--utterances` matrices of 200 x 40 random
features as Kaldi prints them, about 74 kB each: 16 MB for 200) and read in
turn by `kaldiio.load_ark` and by symnet's `iter_table`, `--rounds` times
each, alternating; the table gives the median seconds, MB/s and the ratio
symnet / kaldiio (below 1: symnet is faster). The values must be equal.

    python benchmarks/text_ark.py [--utterances 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import kaldiio
import numpy as np

from symnet._src.kaldi_io.tables import iter_table


def write_archive(path: Path, utterances: int) -> None:
    rng = np.random.default_rng(0)
    with path.open("w") as f:
        for i in range(utterances):
            rows = rng.standard_normal((200, 40)).astype(np.float32)
            body = "\n".join("  " + " ".join(f"{x:.7g}" for x in row) for row in rows)
            f.write(f"utt{i}  [\n{body} ]\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--utterances", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "feats.ark"
        write_archive(path, args.utterances)
        megabytes = path.stat().st_size / 1e6
        times: dict[str, list[float]] = {"kaldiio": [], "symnet": []}
        for _ in range(args.rounds):
            start = time.perf_counter()
            theirs = dict(kaldiio.load_ark(str(path)))
            times["kaldiio"].append(time.perf_counter() - start)
            start = time.perf_counter()
            ours = dict(iter_table(f"ark,t:{path}"))
            times["symnet"].append(time.perf_counter() - start)
        assert ours.keys() == theirs.keys() and all(np.array_equal(ours[k], theirs[k]) for k in theirs)
    median = {name: statistics.median(values) for name, values in times.items()}
    print(f"text archive of {args.utterances} utterances, {megabytes:.1f} MB; median of {args.rounds} rounds")
    print("| reader | seconds | MB/s |")
    print("|---|---|---|")
    for name, seconds in median.items():
        print(f"| {name} | {seconds:.2f} | {megabytes / seconds:.1f} |")
    print(f"symnet / kaldiio: {median['symnet'] / median['kaldiio']:.2f}")


if __name__ == "__main__":
    main()
