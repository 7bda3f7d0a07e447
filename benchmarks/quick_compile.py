"""What the test suite's quick XLA flags (`tests/conftest.py`'s QUICK_XLA_FLAGS) buy: the time to compile and run
the suite's kind of work, against XLA's defaults.

The work, in a fresh process per run (so no program is compiled twice): six
Kaldi corpus cases (`tests/data`), each read, run as nnet3-compute and
evaluated exactly (two recurrent, four not), and 40 tiny jitted programs. Runs
alternate between the flags `--rounds` times each; the table gives the median
seconds and the ratio quick / default.

    python benchmarks/quick_compile.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CASES = ("default_1000_81", "default_1000_84", "multiout_3000_11", "x04_fast_lstm", "component_6000_0", "b04_sum")

WORK = """
import json, sys, time, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, sys.argv[1])
start = time.perf_counter()
import jax, jax.numpy as jnp
from helpers.kaldi_corpus import case_folder, compute_runs, exact_run, read_ark
from symnet.kaldi import read_model
from symnet.kaldi import Nnet3Computer
from symnet.kaldi import exact_outputs
cases = {}
for case in sys.argv[2:]:
    t = time.perf_counter()
    folder = case_folder(case)
    network = read_model(folder / "model.txt").network
    feats = list(read_ark(folder / "input.txt").values())
    run = next(r for r in compute_runs(folder) if r.output == "output" and not r.ivectors)
    Nnet3Computer(network, run.options).compute_many(feats)
    exact_outputs(network, feats, outputs=exact_run(folder).outputs)
    cases[case] = time.perf_counter() - t
t = time.perf_counter()
for i in range(40):
    jax.jit(lambda a, i=i: jnp.tanh(a * (i + 1.0)) + a)(jnp.ones((i + 2, 5))).block_until_ready()
print(json.dumps({"cases": sum(cases.values()), "tiny": time.perf_counter() - t}))
"""


def quick_flags() -> str:
    sys.path.insert(0, str(REPO / "tests"))
    os.environ.pop("XLA_FLAGS", None)
    import conftest  # the suite's own settings

    return conftest.QUICK_XLA_FLAGS


def run(flags: str) -> dict[str, float]:
    env = {**os.environ, "XLA_FLAGS": flags, "SYMNET_COMPILE_CACHE": "off", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run(
        [sys.executable, "-c", WORK, str(REPO / "tests"), *CASES], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    flags = {"default": "", "quick": quick_flags()}
    times: dict[str, list[dict[str, float]]] = {name: [] for name in flags}
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for _ in range(args.rounds):
        for name, value in flags.items():
            times[name].append(run(value))
    print(f"{started}, {args.rounds} rounds; quick flags: {flags['quick']}")
    print("| work | default (s) | quick (s) | quick / default |")
    print("|---|---|---|---|")
    for key, what in (("cases", f"{len(CASES)} corpus cases"), ("tiny", "40 tiny programs")):
        default = statistics.median(t[key] for t in times["default"])
        quick = statistics.median(t[key] for t in times["quick"])
        print(f"| {what} | {default:.2f} | {quick:.2f} | {quick / default:.2f} |")


if __name__ == "__main__":
    main()
