"""Where the digits recipe's chain training step spends its time: per chunk width, the step's measured time
against its floating-point work (XLA's count for the lowered step) at this machine's measured matrix-product
rate; with natural gradient (as the recipe trains), and with `--plain` also without it.

    python benchmarks/chain_step.py [--utterances 400] [--epochs 3] [--plain]

The data are chain_compile.py's stand-in for the synthesised corpus (random features, random phone sequences
of 40 phones), trained by `digits_chain.train` itself: the recipe's TDNN-F, chain egs made on the fly
(`--num-frames=90,60,42`, so three chunk widths), Kaldi's rules, minibatches of 64. A step's time is from
the call to its loss on the host (`fit` reads it every step), the median over each width's steps but its
first (which compiles); the work is `cost_analysis()["flops"]` of the step lowered for that width's minibatch, which
counts every operation, products and element-wise alike. "At the matmul rate" is that work at the rate of
2048x2048 float32 products measured in the same process: the step's time if all its work ran as fast as a
large product, a floor no implementation reaches. Each setting runs in a fresh process. Prints a table with
the CPU model.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from machine import header

WORK = """
import json, statistics, sys, time, warnings
from pathlib import Path
warnings.filterwarnings("ignore")
sys.path.insert(0, sys.argv[1])
import jax
import digits_chain
from chain_compile import stand_in
from run_all import matmul_rate
from symnet._src.train import trainer as training

folder, utterances, epochs, natural = Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
corpus, features = stand_in(utterances)
times, examples = {}, {}  # per width: step seconds; one step's arguments, abstract
step = training.Trainer.step


def timed(self, network, opt_state, x, *rest):
    width = self.width_of(x)
    if width not in examples:
        shape = lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype) if isinstance(a, jax.Array) else a
        examples[width] = (self, jax.tree.map(shape, (network, opt_state, x, *rest)))
    start = time.perf_counter()
    out = step(self, network, opt_state, x, *rest)
    float(out[2])  # the loss on the host, as fit reads it
    times.setdefault(width, []).append(time.perf_counter() - start)
    return out


training.Trainer.step = timed
digits_chain.train(corpus, features, folder, epochs, natural_gradient=natural)
rate = matmul_rate()
rows = {}
for width, (trainer, args) in sorted(examples.items()):
    cost = trainer.jitted_step.lower(*args).cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    median = statistics.median(times[width][1:])
    rows[width] = {"steps": len(times[width]), "median": median, "flops": float(cost["flops"])}
print(json.dumps({"rate": rate, "rows": rows}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--utterances", type=int, default=400)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--folder", default="/tmp/symnet-chain-step", help="where the features are written")
    p.add_argument("--plain", action="store_true", help="also the steps without natural gradient")
    args = p.parse_args()
    Path(args.folder).mkdir(parents=True, exist_ok=True)
    here = str(Path(__file__).resolve().parent)
    print(header())
    print(
        "\n| training step | chunk width (frames) | steps | median step | GFLOP a step | at the matmul rate "
        "| share of the step |"
    )
    print("|---|---|---|---|---|---|---|")
    settings = [("natural gradient", True)] + ([("plain (no natural gradient)", False)] if args.plain else [])
    for name, natural in settings:
        command = [sys.executable, "-c", WORK, here, args.folder, str(args.utterances), str(args.epochs)]
        out = subprocess.run([*command, str(int(natural))], check=True, capture_output=True, text=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        for width, row in r["rows"].items():
            floor = row["flops"] / r["rate"]
            print(
                f"| {name} | {width} | {row['steps']} | {row['median']:.3f} s | {row['flops'] / 1e9:.1f} "
                f"| {floor:.3f} s | {floor / row['median']:.2f} |",
                flush=True,
            )
        print(f"<!-- {name}: matmul rate {r['rate'] / 1e9:.0f} GFLOP/s -->", flush=True)


if __name__ == "__main__":
    main()
