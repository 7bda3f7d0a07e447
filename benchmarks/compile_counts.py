"""XLA compilations of `Network.compute` for many utterance lengths (the figures in docs/performance.md).

A two-layer TDNN (40 inputs, 64 hidden, contexts [-2, 0, 2] and [-1, 0, 3])
and a BLSTM (benchmarks/recurrent.py's, 64 cells per direction, written with
`IfDefined(Offset(Ref(...), -1))` and `+1`): `Network.compute` on 30
utterances of 30 lengths (100-400 frames), then on 100 utterances of 100
further lengths (1-2,000 frames). Compilations are counted with jax's
backend-compile events. Then chunked computation (`frames_per_chunk=20`) of
one utterance of 200, 400 and 2,000 frames, for the TDNN and for a TDNN
feeding a forward recurrence (`IfDefined(Offset(Ref('r'), -1))`), with state
carried and with each chunk on its own (10 frames of extra left context), and
`symnet.Stream` fed 7 frames at a time. Run it on an older checkout
(`PYTHONPATH=that/checkout python benchmarks/compile_counts.py`) for the
figures before shape buckets.

    python benchmarks/compile_counts.py
"""

from __future__ import annotations

import time

import jax
import jax.monitoring
import numpy as np

from recurrent import blstm_network
from symnet import (
    Append,
    IfDefined,
    Input,
    Network,
    Node,
    Normal,
    Offset,
    Ref,
    ReLU,
    Stream,
    Tanh,
    Weight,
    clear_caches,
)

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


def hidden() -> Node:
    """The TDNN's first layer."""
    x = Input("input", 40)
    return Node("h", ReLU(Append(Offset(x, -2), x, Offset(x, 2)) @ Weight(Normal((120, 64), 0.1))))


def main() -> None:
    compiled: list[str] = []

    def listener(event: str, duration_secs: float, **kwargs: object) -> None:
        if event == BACKEND_COMPILE:
            compiled.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    rng = np.random.default_rng(0)
    first = rng.choice(np.arange(100, 401), size=30, replace=False)
    more = rng.choice(np.setdiff1d(np.arange(1, 2001), first), size=100, replace=False)
    h = hidden()
    net = Network({"output": Append(Offset(h, -1), h, Offset(h, 3)) @ Weight(Normal((192, 64), 0.1))})
    for name, network in (("TDNN", net), ("BLSTM", blstm_network(cells=64))):
        clear_caches()
        for what, lengths in (("30 lengths of 100-400 frames", first), ("100 more lengths of 1-2000 frames", more)):
            utts = [rng.standard_normal((int(t), 40)).astype(np.float32) for t in lengths]
            before, started = len(compiled), time.perf_counter()
            network.compute(utts)
            print(f"{name}, {what}: {len(compiled) - before} compilations, {time.perf_counter() - started:.1f} s")
    r = Node(
        "r", Tanh(h @ Weight(Normal((64, 32), 0.1)) + IfDefined(Offset(Ref("r"), -1)) @ Weight(Normal((32, 32), 0.1)))
    )
    nets = {"TDNN": net, "TDNN + recurrence": Network({"output": r @ Weight(Normal((32, 16), 0.1))})}
    for name, network in nets.items():
        for how in ("carry_state=True", "carry_state=False", "Stream, 7 frames a feed"):
            counts = []
            for frames in (200, 400, 2000):
                clear_caches()
                utt = rng.standard_normal((frames, 40)).astype(np.float32)
                before, started = len(compiled), time.perf_counter()
                _chunked(network, how, utt)
                counts.append(f"T={frames}: {len(compiled) - before} ({time.perf_counter() - started:.1f} s)")
            print(f"{name}, chunks of 20, {how}: compilations " + ", ".join(counts))
    jax.monitoring.unregister_event_duration_listener(listener)


def _chunked(network: Network, how: str, x: np.ndarray) -> None:
    """One utterance in chunks of 20 frames, as `how` says."""
    if how == "carry_state=True":
        network.compute(x[None], frames_per_chunk=20)
    elif how == "carry_state=False":
        network.compute(x[None], frames_per_chunk=20, carry_state=False, extra_left_context=10)
    else:
        stream = Stream(network, frames_per_chunk=20)
        for start in range(0, len(x), 7):
            stream.feed(x[start : start + 7])
        stream.finish()


if __name__ == "__main__":
    main()
