"""What keeping freed host memory (`symnet.tune_host_memory`) buys: page faults and step times against glibc's default.

Each measurement runs in fresh processes that call `symnet.tune_host_memory()`,
alternately with symnet's setting (`kept`) and with `SYMNET_HOST_MEMORY=system`
(glibc as it is), `--rounds` times each; the table gives medians and the ratio
kept / system.

- `new 26 MB array`: one jitted `a * 2` whose output is a fresh
  `[200, 32, 1024]` float32 array (W3's gate buffer), and the minor page
  faults per call;
- `W1`, `W2`, `W3` (`benchmarks/workloads.py`): the symnet train step and the
  fastest of the hand-written JAX reference variants, which share the process
  and so the setting.

    python benchmarks/host_memory.py [--rounds 2] [--only array,w1,w2,w3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

from machine import header

HERE = os.path.dirname(os.path.abspath(__file__))


def child(what: str) -> dict:
    import jax
    import jax.numpy as jnp

    import symnet

    out: dict = {"mode": symnet.tune_host_memory()}
    if what == "array":
        a = jnp.ones((200, 32, 1024), jnp.float32)
        double = jax.jit(lambda a: a * 2.0)
        for _ in range(3):
            jax.block_until_ready(double(a))
        times, faults = [], resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(30):
            t = time.perf_counter()
            jax.block_until_ready(double(a))
            times.append(time.perf_counter() - t)
        out["faults"] = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / 30
        out["symnet"] = float(np.median(times))
        return out
    sys.path.insert(0, HERE)
    from run_all import step_times
    from workloads import w1, w2, w3

    workload = {"w1": w1, "w2": w2, "w3": w3}[what]()
    out["symnet"], out["reference"], _ = step_times(workload, 6 if what == "w2" else 20)
    return out


def measure(what: str, mode: str) -> dict:
    env = dict(os.environ)
    env.pop("SYMNET_HOST_MEMORY", None)
    if mode == "system":
        env["SYMNET_HOST_MEMORY"] = "system"
    run = subprocess.run(
        [sys.executable, __file__, "--child", what], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", default="array,w1,w2,w3")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    print(header())
    print(
        "| measurement | kept (ms) | system (ms) | kept / system | reference kept / system "
        "| faults per call kept / system |"
    )
    print("|---|---|---|---|---|---|")
    for what in args.only.split(","):
        runs: dict[str, list[dict]] = {"kept": [], "system": []}
        for _ in range(args.rounds):
            for mode in ("kept", "system"):
                runs[mode].append(measure(what, mode))
        if runs["kept"][0]["mode"] != "kept":
            print(f"| {what} | symnet._src.base.host_memory is {runs['kept'][0]['mode']!r} here: nothing to compare |")
            continue
        med = {m: {k: float(np.median([r[k] for r in rs])) for k in rs[0] if k != "mode"} for m, rs in runs.items()}
        kept, system = med["kept"], med["system"]
        ref = f"{kept['reference'] / system['reference']:.2f}" if "reference" in kept else ""
        faults = f"{kept['faults']:.0f} / {system['faults']:.0f}" if "faults" in kept else ""
        name = "new 26 MB array" if what == "array" else f"{what.upper()} symnet step"
        print(
            f"| {name} | {kept['symnet'] * 1e3:.2f} | {system['symnet'] * 1e3:.2f} "
            f"| {kept['symnet'] / system['symnet']:.2f} | {ref} | {faults} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
