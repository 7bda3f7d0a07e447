"""Start-up: `import symnet`, `symnet --help` and `symnet info` in fresh processes, against `import jax`.

    python benchmarks/startup.py [--rounds 3] [--config examples/kaldi-doc-example.config]
        [--xconfig examples/tdnnf.xconfig]

Each row is one new interpreter, timed from its start to its exit (wall clock,
output thrown away). Per round every row runs once, in an order rotated from
round to round, so a burst of load on the shared machine hits every row; the
table gives each row's median seconds, its range, and the median over rounds
of its time divided by `import jax`'s in the same round. `python -c pass` is
the interpreter's own start, under every row. `symnet info` runs on the
config, the xconfig, and a symnet file of the config's network (written by
`symnet init` into a temporary folder first).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
CLI = "import sys; from symnet._src.app.cli import main; sys.exit(main())"  # what the `symnet` script runs


def rows(config: str, xconfig: str, saved: str) -> dict[str, list[str]]:
    python = sys.executable
    return {
        "python -c pass": [python, "-c", "pass"],
        "import jax": [python, "-c", "import jax"],
        "import symnet": [python, "-c", "import symnet"],
        "symnet --help": [python, "-c", CLI, "--help"],
        f"symnet info {os.path.relpath(config, REPO)}": [python, "-c", CLI, "info", config],
        f"symnet info {os.path.relpath(xconfig, REPO)}": [python, "-c", CLI, "info", xconfig],
        f"symnet info {Path(saved).name} (symnet init of the config)": [python, "-c", CLI, "info", saved],
    }


def seconds(command: list[str]) -> float:
    """Wall-clock seconds of one run of `command` (a failure is an error: a broken row is no figure)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the warm-up runs write .pyc files, as installing a package does
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO, env=env)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--config", default=str(REPO / "examples" / "kaldi-doc-example.config"))
    parser.add_argument("--xconfig", default=str(REPO / "examples" / "tdnnf.xconfig"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        saved = str(Path(folder) / "network.npz")
        seconds([sys.executable, "-c", CLI, "init", args.config, saved])
        measure(rows(args.config, args.xconfig, saved), args.rounds)


def measure(table: dict[str, list[str]], rounds: int) -> None:
    """Run every row `rounds` times, interleaved, and print the table."""
    names = list(table)
    times: dict[str, list[float]] = {name: [] for name in names}
    for name in names:  # one warm-up run each: the file cache, .pyc files
        seconds(table[name])
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            times[name].append(seconds(table[name]))
    print(f"python {platform.python_version()}, {platform.processor() or platform.machine()}, {os.cpu_count()} cpus")
    print(f"\n| command (fresh process) | median (s) | range (s) | / import jax, median of {rounds} rounds |")
    print("|---|---|---|---|")
    reference = times["import jax"]
    for name in names:
        ratio = np.median([t / ref for t, ref in zip(times[name], reference, strict=True)])
        print(
            f"| `{name}` | {np.median(times[name]):.3f} | {min(times[name]):.3f}-{max(times[name]):.3f} | {ratio:.2f} |"
        )


if __name__ == "__main__":
    main()
