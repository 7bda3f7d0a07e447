"""Run the benchmark workloads and print the tables quoted in docs/performance.md.

    python benchmarks/run_all.py                       # every row and compiler figure, full sizes
    python benchmarks/run_all.py --only w3,gru         # some rows (the keys of ROWS, and compiler)
    python benchmarks/run_all.py --quick               # smaller sizes, for a smoke test

Every timing is a ratio against the fastest hand-written reference measured
in the same round: each workload has several reference variants
(workloads.py: how a splice or a recurrence is written); per round, each
step kind (symnet's and every variant's) takes `--steps` steps interleaved
with the others' after warm-up, blocking on results, and symnet's median step
is divided by the fastest variant's median step, in wall-clock time and in
process CPU time (which other jobs on a shared machine move less). Rounds go
over all selected workloads in turn, so a burst of load hits every row; the
tables give the median ratio over `--rounds` rounds, its range, and which
variant was fastest in each round. Before timing, every variant's loss and
gradients are checked against the first variant's at the `--quick` sizes. It
keeps freed host memory first (`symnet.tune_host_memory()`, as `fit` does;
`import symnet` did so itself when the figures of docs/performance.md dated
from 2026-12-01 17:09 UTC on were measured).
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import symnet
from machine import header
from recurrent import blstm, gru, kaldi_lstm
from symnet import IndexSet
from symnet._src.engine import compiling as compiling_module
from symnet.engine import ComputationRequest, compile
from workloads import w1, w2, w2_network, w3

ROWS = {
    "w1": lambda quick: w1(num_sequences=64) if quick else w1(),
    "w2": lambda quick: w2(num_sequences=4, frames_out=50) if quick else w2(),
    "w2-grad": lambda quick: (
        w2(num_sequences=4, frames_out=50, through="jax.grad") if quick else w2(through="jax.grad")
    ),
    "w2-plain": lambda quick: w2(num_sequences=4, frames_out=50, lowering="plain") if quick else w2(lowering="plain"),
    "w2-fused": lambda quick: w2(num_sequences=4, frames_out=50, lowering="fused") if quick else w2(lowering="fused"),
    "w3": lambda quick: w3(num_sequences=8, frames=50) if quick else w3(),
    "gru": lambda quick: gru(num_sequences=8, frames=50) if quick else gru(),
    "blstm": lambda quick: blstm(num_sequences=8, frames=50) if quick else blstm(),
    "kaldi-lstm": lambda quick: kaldi_lstm(num_sequences=8, frames=50) if quick else kaldi_lstm(),
}


#: The largest relative difference in loss or gradients allowed between reference variants (float32).
AGREEMENT = 1e-5


def step_times(workload, steps: int) -> tuple[float, float, str]:
    """Symnet's median step and the fastest reference variant's, over `steps` interleaved steps after warm-up,
    seconds, and that variant's name."""
    times = step_and_cpu_times(workload, steps)
    fastest = min(workload.references, key=lambda name: times[name][0])
    return times["symnet"][0], times[fastest][0], fastest


def step_and_cpu_times(workload, steps: int) -> dict[str, tuple[float, float]]:
    """Per step kind ("symnet" and each reference variant), the median wall-clock time and process CPU time (all
    threads) of `steps` steps after warm-up, seconds; the kinds take a step each in turn, the order reversed every
    other step. On a shared machine a step's CPU time moves less with other jobs' load than its wall-clock time."""
    runs = {"symnet": workload.symnet_step, **workload.references}
    for _ in range(3):
        for run in runs.values():
            run()
    wall: dict[str, list[float]] = {kind: [] for kind in runs}
    cpu: dict[str, list[float]] = {kind: [] for kind in runs}
    for i in range(steps):
        for kind in list(runs)[:: 1 if i % 2 == 0 else -1]:
            t, c = time.perf_counter(), time.process_time()
            runs[kind]()
            wall[kind].append(time.perf_counter() - t)
            cpu[kind].append(time.process_time() - c)
    return {kind: (float(np.median(wall[kind])), float(np.median(cpu[kind]))) for kind in runs}


def check_references(names: list[str]) -> None:
    """Each row's reference variants compute the same loss and gradients as its first variant (at the `--quick`
    sizes, from the initial parameters), to `AGREEMENT` relative to each array's largest magnitude."""
    for name in names:
        workload = ROWS[name](True)
        differences = workload.reference_differences()
        first = next(iter(workload.references))
        print(
            f"{workload.name}: variants against {first}: " + ", ".join(f"{k} {v:.1e}" for k, v in differences.items())
        )
        if max(differences.values()) > AGREEMENT:
            raise SystemExit(f"{workload.name}: a reference variant differs from {first} by more than {AGREEMENT}")


def gathers(hlo: str) -> tuple[int, int]:
    return hlo.count(" gather("), hlo.count(" scatter(")


def matmul_rate(size: int = 2048, repeats: int = 10) -> float:
    """The machine's measured float32 matrix-multiply rate (FLOP/s): the best of `repeats` square products."""
    a = jnp.asarray(np.random.default_rng(0).standard_normal((size, size)), jnp.float32)
    product = jax.jit(lambda a: a @ a)
    jax.block_until_ready(product(a))
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(product(a))
        best = min(best, time.perf_counter() - t)
    return 2 * size**3 / best


def step_flops(workload) -> float:
    """XLA's count of the floating-point operations of one symnet train step."""
    cost = workload.symnet_hlo_compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return float(cost.get("flops", 0.0))


def planning_times(sizes: tuple[int, ...]) -> dict[int, float]:
    """Cold planning time (plan + row maps, no XLA) of W2's request, seconds."""
    net = w2_network()
    out = {}
    for n in sizes:
        request = ComputationRequest(
            inputs={"input": IndexSet.range(n=n, t=(-10, 160))},
            outputs={"output": IndexSet.range(n=n, t=150)},
        )
        best = float("inf")
        for _ in range(5):
            compiling_module._CACHE.clear()
            t = time.perf_counter()
            compile(net, request)
            best = min(best, time.perf_counter() - t)
        out[n] = best
    return out


def cached_lookup() -> float:
    """Median time of `compile` for a request already compiled (a cache hit), seconds."""
    net = w2_network()
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=64, t=(-10, 160))}, outputs={"output": IndexSet.range(n=64, t=150)}
    )
    compile(net, request)
    times = []
    for _ in range(200):
        same = ComputationRequest(
            inputs={"input": IndexSet.range(n=64, t=(-10, 160))}, outputs={"output": IndexSet.range(n=64, t=150)}
        )
        t = time.perf_counter()
        compile(net, same)
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def lstm_compile_time(frames: int, sequences: int = 32) -> float:
    """Plan + XLA compile time of W3's training step at `frames` frames, seconds."""
    compiling_module._CACHE.clear()
    jax.clear_caches()
    t = time.perf_counter()
    workload = w3(num_sequences=sequences, frames=frames)
    workload.symnet_hlo_compile()
    return time.perf_counter() - t


def workload_table(names: list[str], quick: bool, steps: int, rounds: int) -> None:
    """Time the rows `names` in `rounds` interleaved rounds; print each round's step times, then the ratio table
    (symnet against the fastest reference variant of each round), the variants' table and W2's matmul rates."""
    workloads = {name: ROWS[name](quick) for name in names}
    # per row, per round: {step kind: (wall-clock median, CPU-time median)}
    measured: dict[str, list[dict[str, tuple[float, float]]]] = {name: [] for name in names}
    for r in range(rounds):
        for name, wl in workloads.items():
            times = step_and_cpu_times(wl, steps)
            measured[name].append(times)
            fastest = min(wl.references, key=lambda k: times[k][0])
            leanest = min(wl.references, key=lambda k: times[k][1])
            variants = ", ".join(f"{k} {times[k][0] * 1e3:.1f}" for k in wl.references)
            print(
                f"round {r + 1} (load average {os.getloadavg()[0]:.1f}): {wl.name}: "
                f"symnet {times['symnet'][0] * 1e3:.1f} ms; references (ms) {variants}; "
                f"/ fastest ({fastest}) {times['symnet'][0] / times[fastest][0]:.3f}; CPU time / least "
                f"({leanest}) {times['symnet'][1] / times[leanest][1]:.3f}",
                flush=True,
            )
    print(
        f"\n| workload | symnet step (ms) | fastest reference step (ms) | symnet / fastest reference, median of "
        f"{rounds} rounds (range) | CPU-time ratio, median (range) | fastest reference, per round | gathers "
        "| scatters |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, wl in workloads.items():
        wall = [(t["symnet"][0], min(t[k][0] for k in wl.references)) for t in measured[name]]
        ratios = [s / ref for s, ref in wall]
        cpu_ratios = [t["symnet"][1] / min(t[k][1] for k in wl.references) for t in measured[name]]
        winners = ", ".join(min(wl.references, key=lambda k: t[k][0]) for t in measured[name])
        g, sc = gathers(wl.symnet_hlo())
        print(
            f"| {wl.name} | {np.median([s for s, _ in wall]) * 1e3:.2f} | {np.median([r for _, r in wall]) * 1e3:.2f} "
            f"| {np.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) "
            f"| {np.median(cpu_ratios):.3f} ({min(cpu_ratios):.3f}-{max(cpu_ratios):.3f}) | {winners} | {g} | {sc} |"
        )
    print("\n| workload | step | median step (ms) | / fastest reference, per round | CPU time / least, per round |")
    print("|---|---|---|---|---|")
    for name, wl in workloads.items():
        for kind in ("symnet", *wl.references):
            ms = np.median([t[kind][0] for t in measured[name]]) * 1e3
            walls = ", ".join(f"{t[kind][0] / min(t[k][0] for k in wl.references):.3f}" for t in measured[name])
            cpus = ", ".join(f"{t[kind][1] / min(t[k][1] for k in wl.references):.3f}" for t in measured[name])
            print(f"| {wl.name} | {kind} | {ms:.2f} | {walls} | {cpus} |")
    if "w2" in workloads:
        rate = matmul_rate()
        flops = step_flops(workloads["w2"])
        s = float(np.median([t["symnet"][0] for t in measured["w2"]]))
        ref = float(np.median([min(t[k][0] for k in workloads["w2"].references) for t in measured["w2"]]))
        print(
            f"\nW2: {flops / 1e9:.1f} GFLOP per step (XLA's count); this machine's matmul rate "
            f"{rate / 1e9:.1f} GFLOP/s (best 2048x2048 product); symnet reaches {flops / s / rate:.2f} of it, "
            f"the fastest reference {flops / ref / rate:.2f}"
        )


def compiler_table() -> None:
    plan = planning_times((1, 64, 1024))
    print("\n| compiler figure | value |")
    print("|---|---|")
    for n, t in plan.items():
        print(f"| W2 cold planning, N = {n} | {t * 1e3:.1f} ms |")
    print(f"| W2 planning ratio N=1024 / N=64 | {plan[1024] / plan[64]:.2f} |")
    print(f"| cached lookup | {cached_lookup() * 1e6:.1f} µs |")
    short, long_ = lstm_compile_time(50), lstm_compile_time(1000)
    print(f"| W3 plan + XLA compile, T = 50 | {short:.2f} s |")
    print(f"| W3 plan + XLA compile, T = 1000 | {long_:.2f} s |")
    print(f"| W3 compile ratio T=1000 / T=50 | {long_ / short:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller workloads (smoke test)")
    parser.add_argument("--steps", type=int, default=30, help="interleaved steps per round (median)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=",".join([*ROWS, "compiler"]), help="comma-separated rows")
    args = parser.parse_args()
    symnet.tune_host_memory()
    selected = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(selected) - set(ROWS) - {"compiler"})
    if unknown:
        parser.error(f"unknown rows {unknown}; choose from {[*ROWS, 'compiler']}")
    print(header())
    names = [s for s in selected if s in ROWS]
    if names:
        check_references(names)
        workload_table(names, args.quick, args.steps, args.rounds)
    if "compiler" in selected:
        compiler_table()


if __name__ == "__main__":
    main()
