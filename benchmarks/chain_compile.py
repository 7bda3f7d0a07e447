"""What a first run of the digits recipe's chain training spends compiling: the training step of its chain
TDNN-F (digits_chain.py's xconfig, LF-MMI with xent regularisation and a leaky HMM, Kaldi's training rules),
once per chunk width, with natural gradient (`kaldi_rules(..., natural_gradient=True)`, as the recipe trains)
and without.

    python benchmarks/chain_compile.py [--utterances 150]

The data need no synthesiser: random 40-dim features for `--utterances` utterances of 60 to 300 frames, each a
random sequence of 40 phones of 3 to 15 frames, made into chain egs on the fly by `stream_chain_data` as the
recipe makes them: `digits_chain.train` itself, on a stand-in for the synthesised corpus. Each setting trains
one epoch in a fresh process (nothing compiled before it, no compile cache); jax.monitoring reports each XLA
compilation, and those of a second or more are the steps (one per chunk width: a window's numerators are padded
to its largest of each width) and, with natural gradient, the preconditioners' update (one program for every
width: `symnet._src.components.online_preconditioner`). Prints them per setting, with the CPU model.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np

from machine import header

WORK = """
import json, sys, warnings
from pathlib import Path
warnings.filterwarnings("ignore")
sys.path.insert(0, sys.argv[1])
import jax.monitoring
import digits_chain
from chain_compile import stand_in

folder, utterances, natural = Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
corpus, features = stand_in(utterances)
compiled = []


def on_event(event, seconds, fun_name="", **_):
    if event == "/jax/core/compile/backend_compile_duration":
        compiled.append((str(fun_name), seconds))


jax.monitoring.register_event_duration_secs_listener(on_event)
_, wall, _ = digits_chain.train(corpus, features, folder, 1, natural_gradient=natural)
big = [(name, s) for name, s in compiled if s >= 1.0]
print(json.dumps({"compiles": [s for name, s in big if "advance" not in name],
                  "update": sum(s for name, s in big if "advance" in name),
                  "small": sum(s for _, s in compiled if s < 1.0), "wall": wall}))
"""


def stand_in(utterances: int) -> tuple[Any, list[np.ndarray]]:
    """What `digits_chain.train` reads of a synthesised corpus, for `utterances` random utterances of 60 to 300
    frames (random 40-dim features, each a random sequence of 40 phones of 3 to 15 frames), and the features."""
    rng = np.random.default_rng(0)
    phones, lengths, features = 40, {}, []
    for u in range(utterances):
        runs, total = [], int(rng.integers(60, 301))
        while total > 0:
            n = min(int(rng.integers(3, 16)), total)
            runs.append((int(rng.integers(1, phones + 1)), n))
            total -= n
        lengths[f"utt{u:04d}"] = np.array(runs)
        features.append(rng.standard_normal((sum(n for _, n in runs), 40)).astype(np.float32))
    corpus = types.SimpleNamespace(
        sets={"train": [types.SimpleNamespace(id=key) for key in lengths]},
        phones=tuple(f"p{i}" for i in range(1, phones + 1)),
        phone_lengths=lambda u: lengths[u.id],
    )
    return corpus, features


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--utterances", type=int, default=150)
    p.add_argument("--folder", default="/tmp/symnet-chain-compile", help="where the features are written")
    args = p.parse_args()
    Path(args.folder).mkdir(parents=True, exist_ok=True)
    here = str(Path(__file__).resolve().parent)
    print(header())
    rows = []
    for natural in (False, True):
        out = subprocess.run(
            [sys.executable, "-c", WORK, here, args.folder, str(args.utterances), "1" if natural else "0"],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        r = json.loads(out.stdout.strip().splitlines()[-1])
        name = "natural gradient" if natural else "plain (no natural gradient)"
        each = ", ".join(f"{s:.1f}" for s in r["compiles"])
        print(
            f"{name}: {len(r['compiles'])} step compilations, {sum(r['compiles']):.1f} s ({each}); the "
            f"preconditioners' update {r['update']:.1f} s; smaller ones {r['small']:.1f} s; training {r['wall']:.1f} s",
            flush=True,
        )
        rows.append((name, r))
    print("\n| training step | step compilations | seconds each | the update, once | in all | training, one epoch |")
    print("|---|---|---|---|---|---|")
    for name, r in rows:
        each = ", ".join(f"{s:.1f}" for s in r["compiles"])
        update = f"{r['update']:.1f} s" if r["update"] else "-"
        total = sum(r["compiles"]) + r["update"]
        print(f"| {name} | {len(r['compiles'])} | {each} | {update} | {total:.1f} s | {r['wall']:.1f} s |")


if __name__ == "__main__":
    main()
