"""Large offsets and long Append lists cost time in proportion to the work, not to the numbers in them.

Two measurements, each in this process after one warm-up, median of `--rounds`:

- `symnet info` of a one-affine config whose input is `Offset(input, K)` for
  K = 1, 1000, 100000 and 1000000 (before: 18.7 s at 100000 against 5 s at 1);
- `symnet xconfig` of a relu-layer whose input is `Append(-N/2, ..., N/2-1)`
  for N = 1024, 4096 and 16384: the milliseconds each added term costs (from
  one N to the next) should stay flat.

    python benchmarks/large_inputs.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import tempfile
import time
from pathlib import Path

from symnet._src.app.cli import main

CONFIG = """input-node name=input dim=3
component name=affine type=AffineComponent input-dim=3 output-dim=4
component-node name=affine component=affine input=Offset(input, {offset})
output-node name=output input=affine objective=linear
"""


def xconfig(terms: int) -> str:
    offsets = ",".join(str(i) for i in range(-terms // 2, terms // 2))
    return (
        f"input dim=3 name=input\nrelu-layer name=tdnn1 dim=8 input=Append({offsets})\noutput-layer name=output dim=4\n"
    )


def seconds(argv: list[str], rounds: int) -> float:
    times = []
    for _ in range(rounds + 1):  # the first round warms up (imports, first compilations)
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            status = main(argv, stdout=io.StringIO(), stderr=io.StringIO())
        assert status == 0, argv
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        print("| Offset(input, K) | symnet info (s) | / K = 1 |")
        print("|---|---|---|")
        base = None
        for offset in (1, 1000, 100_000, 1_000_000):
            path = Path(folder) / f"offset{offset}.config"
            path.write_text(CONFIG.format(offset=offset))
            t = seconds(["info", str(path)], args.rounds)
            base = base or t
            print(f"| {offset} | {t:.3f} | {t / base:.2f} |")
        print()
        print("| Append terms N | symnet xconfig (s) | ms per added term |")
        print("|---|---|---|")
        previous: tuple[int, float] | None = None
        for terms in (1024, 4096, 16384):
            path = Path(folder) / f"append{terms}.xconfig"
            path.write_text(xconfig(terms))
            t = seconds(["xconfig", str(path)], args.rounds)
            marginal = f"{1000 * (t - previous[1]) / (terms - previous[0]):.3f}" if previous else ""
            print(f"| {terms} | {t:.2f} | {marginal} |")
            previous = (terms, t)


if __name__ == "__main__":
    main_()
