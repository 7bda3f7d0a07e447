"""Run the benchmark workloads and print the tables quoted in docs/performance.md.

    python benchmarks/run_all.py            # full sizes (the workloads table of docs/performance.md)
    python benchmarks/run_all.py --quick    # smaller sizes, for a smoke test

Every timing is a ratio against a reference measured in the same run: the
median of `--steps` interleaved steps after warm-up, blocking on results.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import jax
import numpy as np

import symnet
from symnet.core.index import IndexSet
from symnet.engine import ComputationRequest, compile
from symnet.engine import computation as computation_module
from workloads import w1, w2, w2_network, w3


def step_ratio(workload, steps: int) -> tuple[float, float, float]:
    """(symnet median, reference median, ratio) over interleaved steps after warm-up."""
    for _ in range(3):
        workload.symnet_step()
        workload.reference_step()
    a, b = [], []
    for _ in range(steps):
        t = time.perf_counter()
        workload.symnet_step()
        a.append(time.perf_counter() - t)
        t = time.perf_counter()
        workload.reference_step()
        b.append(time.perf_counter() - t)
    return float(np.median(a)), float(np.median(b)), float(np.median(a) / np.median(b))


def gathers(hlo: str) -> tuple[int, int]:
    return hlo.count(" gather("), hlo.count(" scatter(")


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller workloads (smoke test)")
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    print(
        f"symnet {symnet.__version__}, jax {jax.__version__}, {jax.devices()[0].platform}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus"
    )
    if args.quick:
        workloads = [w1(num_sequences=64), w2(num_sequences=4, frames_out=50), w3(num_sequences=8, frames=50)]
    else:
        workloads = [w1(), w2(), w3()]
    print("\n| workload | symnet step (ms) | reference step (ms) | ratio symnet/reference | gathers | scatters |")
    print("|---|---|---|---|---|---|")
    for wl in workloads:
        s, r, ratio = step_ratio(wl, args.steps)
        g, sc = gathers(wl.symnet_hlo())
        print(f"| {wl.name} | {s * 1e3:.2f} | {r * 1e3:.2f} | {ratio:.3f} | {g} | {sc} |")
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


if __name__ == "__main__":
    main()
