"""XLA compilations of `Network.compute` for many utterance lengths (the figures in docs/performance.md).

A two-layer TDNN (40 inputs, 64 hidden, contexts [-2, 0, 2] and [-1, 0, 3])
and a BLSTM (benchmarks/recurrent.py's, 64 cells per direction, written with
`IfDefined(Offset(Ref(...), -1))` and `+1`): `Network.compute` on 30
utterances of 30 lengths (100-400 frames), then on 100 utterances of 100
further lengths (1-2,000 frames). Compilations are counted with jax's
backend-compile events. Run it on an older checkout
(`PYTHONPATH=that/checkout python benchmarks/compile_counts.py`) for the
figures before shape buckets.

    python benchmarks/compile_counts.py
"""

from __future__ import annotations

import time

import jax.monitoring
import numpy as np

from recurrent import blstm_network
from symnet import Append, Input, Network, Node, Normal, Offset, ReLU, Weight, clear_caches

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


def tdnn() -> Network:
    x = Input("input", 40)
    h = Node("h", ReLU(Append(Offset(x, -2), x, Offset(x, 2)) @ Weight(Normal((120, 64), 0.1))))
    return Network({"output": Append(Offset(h, -1), h, Offset(h, 3)) @ Weight(Normal((192, 64), 0.1))})


def main() -> None:
    for name, net in (("TDNN", tdnn()), ("BLSTM", blstm_network(cells=64))):
        print(name)
        count(net)


def count(net: Network) -> None:
    rng = np.random.default_rng(0)
    first = rng.choice(np.arange(100, 401), size=30, replace=False)
    more = rng.choice(np.setdiff1d(np.arange(1, 2001), first), size=100, replace=False)
    compiled: list[str] = []

    def listener(event: str, duration_secs: float, **kwargs: object) -> None:
        if event == BACKEND_COMPILE:
            compiled.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    clear_caches()
    for what, lengths in (("30 lengths of 100-400 frames", first), ("100 more lengths of 1-2000 frames", more)):
        utts = [rng.standard_normal((int(t), 40)).astype(np.float32) for t in lengths]
        before, started = len(compiled), time.perf_counter()
        net.compute(utts)
        print(f"  {what}: {len(compiled) - before} compilations, {time.perf_counter() - started:.1f} s")
    jax.monitoring.unregister_event_duration_listener(listener)


if __name__ == "__main__":
    main()
