"""Run the benchmark workloads and print the tables quoted in docs/performance.md.

    python benchmarks/run_all.py                       # every row and compiler figure, full sizes
    python benchmarks/run_all.py --only w3,gru         # some rows (the keys of ROWS, and compiler)
    python benchmarks/run_all.py --quick               # smaller sizes, for a smoke test

Every timing is a ratio against a reference measured in the same run: per
round, the median of `--steps` interleaved steps (symnet, reference, symnet,
...) after warm-up, blocking on results. Rounds go over all selected
workloads in turn, so a burst of load on the shared machine hits every row;
the table gives the median ratio over `--rounds` rounds and its range. It
keeps freed host memory first (`symnet.tune_host_memory()`, as `fit` does;
`import symnet` did so itself when the figures of docs/performance.md dated
from 2026-12-01 17:09 UTC on were measured).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

import symnet
from recurrent import blstm, gru, kaldi_lstm
from symnet import IndexSet
from symnet._src.engine import computation as computation_module
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


def step_times(workload, steps: int) -> tuple[float, float]:
    """(symnet median, reference median) over `steps` interleaved steps after warm-up, seconds."""
    return step_and_cpu_times(workload, steps)[:2]


def step_and_cpu_times(workload, steps: int) -> tuple[float, float, float, float]:
    """`step_times`, then the same steps' median process CPU times (all threads), seconds: on a shared machine
    a step's CPU time moves less with other jobs' load than its wall-clock time."""
    for _ in range(3):
        workload.symnet_step()
        workload.reference_step()
    a, b, ca, cb = [], [], [], []
    for i in range(steps):
        for run, out, cpu in ((workload.symnet_step, a, ca), (workload.reference_step, b, cb))[
            :: 1 if i % 2 == 0 else -1
        ]:
            t, c = time.perf_counter(), time.process_time()
            run()
            out.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
    return float(np.median(a)), float(np.median(b)), float(np.median(ca)), float(np.median(cb))


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
            computation_module._CACHE.clear()
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
    computation_module._CACHE.clear()
    jax.clear_caches()
    t = time.perf_counter()
    workload = w3(num_sequences=sequences, frames=frames)
    workload.symnet_hlo_compile()
    return time.perf_counter() - t


def workload_table(names: list[str], quick: bool, steps: int, rounds: int) -> None:
    workloads = {name: ROWS[name](quick) for name in names}
    ratios: dict[str, list[float]] = {name: [] for name in names}
    cpu_ratios: dict[str, list[float]] = {name: [] for name in names}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for r in range(rounds):
        for name, wl in workloads.items():
            s, ref, cpu, cpu_ref = step_and_cpu_times(wl, steps)
            ratios[name].append(s / ref)
            cpu_ratios[name].append(cpu / cpu_ref)
            times[name].append((s, ref))
            print(
                f"round {r + 1}: {wl.name}: {s * 1e3:.1f} ms / {ref * 1e3:.1f} ms = {s / ref:.3f} "
                f"(CPU time {cpu / cpu_ref:.3f})",
                flush=True,
            )
    print(
        f"\n| workload | symnet step (ms) | reference step (ms) | ratio symnet/reference, median of {rounds} rounds "
        "| range over rounds | CPU-time ratio, median (range) | gathers | scatters |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, wl in workloads.items():
        s = float(np.median([t[0] for t in times[name]]))
        ref = float(np.median([t[1] for t in times[name]]))
        g, sc = gathers(wl.symnet_hlo())
        lo, hi = min(ratios[name]), max(ratios[name])
        print(
            f"| {wl.name} | {s * 1e3:.2f} | {ref * 1e3:.2f} | {np.median(ratios[name]):.3f} | {lo:.3f}-{hi:.3f} "
            f"| {np.median(cpu_ratios[name]):.3f} ({min(cpu_ratios[name]):.3f}-{max(cpu_ratios[name]):.3f}) "
            f"| {g} | {sc} |"
        )
    if "w2" in workloads:
        rate = matmul_rate()
        flops = step_flops(workloads["w2"])
        s = float(np.median([t[0] for t in times["w2"]]))
        ref = float(np.median([t[1] for t in times["w2"]]))
        print(
            f"\nW2: {flops / 1e9:.1f} GFLOP per step (XLA's count); this machine's matmul rate "
            f"{rate / 1e9:.1f} GFLOP/s (best 2048x2048 product); symnet reaches {flops / s / rate:.2f} of it, "
            f"the reference {flops / ref / rate:.2f}"
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
    print(
        f"symnet {symnet.__version__}, jax {jax.__version__}, {jax.devices()[0].platform}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus"
    )
    names = [s for s in selected if s in ROWS]
    if names:
        workload_table(names, args.quick, args.steps, args.rounds)
    if "compiler" in selected:
        compiler_table()


if __name__ == "__main__":
    main()
