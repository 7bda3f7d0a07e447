"""Where one benchmark step's time goes: per-kernel times from `jax.profiler`, for a row of run_all.py.

    python benchmarks/profile_step.py w2                  # symnet's Tape step of W2
    python benchmarks/profile_step.py w3 --reference in-body   # a hand-written reference variant's step
    python benchmarks/profile_step.py w2 --timeline 1     # also every kernel of one step over 1 ms, in order

The step runs `--steps` times (after three warm-up steps) under `jax.profiler.trace`; the table gives, per
kernel of the compiled program (XLA's fusion names, with the result shape from the compiled HLO), its time
per step summed over XLA's CPU threads and how many times a step runs it (a loop body's kernels run once a
frame). Kernels that run concurrently overlap, and a convolution's work runs on Eigen's threads, which the
profiler does not see: compare kernels within one profile, and whole steps with run_all.py. The timeline
(`--timeline MS`) lists the kernels of the last step that took at least MS milliseconds, by start time;
the gaps between them are such unseen work.
"""

from __future__ import annotations

import argparse
import collections
import re
import tempfile
import time
from pathlib import Path

import jax
from jax.profiler import ProfileData

import symnet
from machine import header
from run_all import ROWS


def result_shapes(hlo: str) -> dict[str, str]:
    """Each instruction's result type in the compiled HLO text, by name."""
    return {m.group(1): m.group(2) for m in re.finditer(r"%([\w.\-]+) = ((?:\([^)]*\))|\S+)", hlo)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("row", choices=sorted(ROWS), help="a row of run_all.py")
    parser.add_argument(
        "--reference", metavar="NAME", help="profile this hand-written reference variant's step (workloads.py)"
    )
    parser.add_argument("--quick", action="store_true", help="run_all.py's smaller sizes")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--top", type=int, default=25, help="how many kernels to list")
    parser.add_argument("--timeline", type=float, default=None, metavar="MS")
    args = parser.parse_args()
    symnet.tune_host_memory()  # as run_all.py does
    workload = ROWS[args.row](args.quick)
    if args.reference is not None and args.reference not in workload.references:
        parser.error(f"{workload.name} has the reference variants {list(workload.references)}, not {args.reference!r}")
    step = workload.symnet_step if args.reference is None else workload.references[args.reference]
    shapes = {} if args.reference is not None else result_shapes(workload.symnet_hlo_compile().as_text())
    for _ in range(3):
        step()
    with tempfile.TemporaryDirectory() as folder:
        jax.profiler.start_trace(folder)
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        wall = (time.perf_counter() - start) / args.steps
        jax.profiler.stop_trace()
        trace = ProfileData.from_file(str(next(Path(folder).rglob("*.xplane.pb"))))
    total: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    events = []
    for plane in trace.planes:
        for line in plane.lines:
            if line.name == "python":
                continue
            for event in line.events:
                if event.name.startswith(("ThunkExecutor", "SlinkyThreadPool")):
                    continue
                total[event.name] += event.duration_ns
                count[event.name] += 1
                events.append((event.start_ns, event.duration_ns, event.name))
    who = "symnet" if args.reference is None else f"the reference variant {args.reference}"
    print(header())
    print(
        f"{workload.name}, {who}'s step: {wall * 1e3:.1f} ms a step (under the profiler), kernels seen "
        f"{sum(total.values()) / args.steps / 1e6:.1f} ms a step summed over threads"
    )
    print("| kernel | result | ms a step | runs a step |\n|---|---|---|---|")
    for name, ns in total.most_common(args.top):
        print(f"| {name} | {shapes.get(name, '')} | {ns / args.steps / 1e6:.2f} | {count[name] / args.steps:g} |")
    if args.timeline is not None:
        events.sort()
        last = events[-(len(events) // args.steps) :]
        origin = last[0][0]
        print("\n| start (ms) | took (ms) | kernel |\n|---|---|---|")
        for begin, took, name in last:
            if took >= args.timeline * 1e6:
                print(f"| {(begin - origin) / 1e6:.1f} | {took / 1e6:.1f} | {name} |")


if __name__ == "__main__":
    main()
