"""`Network.compute` on a list of utterances of different lengths: a 2-layer BLSTM, whole and in chunks.

The network is two `Bidirectional(LSTM, ...)` layers of the typed layers (`--cells` cells, projection to half
of them) between an input affine and a log-softmax output, over `--utterances` utterances of 80 to 600 frames
(uniform, seeded) of 40-dim features: the evaluation set of a speech researcher. Each row is the median
of `--rounds` calls after one warm-up call (which compiles), in frames per second, in this process:

- `whole, calls of N frames`: each utterance computed whole, padded to its bucket and batched with others of
  its bucket, at most N frames a call (`symnet._src.engine.buckets.BATCH_FRAMES`: the default, and 1024,
  the default until 2026-12-03, as the reference of the same run);
- `chunks of 50 on their own`: `frames_per_chunk=50, carry_state=False` with 20 frames of extra context each
  side (nnet3-compute's way), every chunk of every utterance batched with the others of its shape.

Also printed: the programs each warm-up call compiled, and how far the chunked outputs are from the whole ones
(a BLSTM that sees 20 frames of the future is another computation: this shows that both ran). Then a
bidirectional GRU with multi-head attention over a window of 10 frames each way (`MultiHeadAttention`, a
window of optional reads): its reach in frames (`time_reach`, beside the sum of every time-moving read, the
bound before 2026-12-03), and the seconds of its first call (planning, the masks of each sequence end,
compiling) and of a later one.

    python benchmarks/ragged_compute.py [--utterances 200] [--cells 128] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import symnet
from symnet import Input, LogSoftmax, Network, Node
from symnet._src.core.descriptor import Descriptor
from symnet._src.engine import buckets
from symnet._src.engine.graph import Graph
from symnet._src.engine.plan import time_reach
from symnet.engine import record
from symnet.layers import GRU, LSTM, Affine, Bidirectional, LayerNorm, MultiHeadAttention

FEATURES, OUTPUTS = 40, 48


def blstm(cells: int) -> Network:
    h = Node("in", Affine(Input("input", FEATURES), cells))
    for layer in ("blstm1", "blstm2"):
        h = Bidirectional(LSTM, layer, h, cell=cells, projection=cells // 2)
    return Network(LogSoftmax(Node("output", Affine(h, OUTPUTS))), seed=0)


def attention(cells: int) -> Network:
    h = Node("in", Affine(Input("input", FEATURES), cells))
    h = Bidirectional(GRU, "bgru", h, cell=cells // 2)
    a = MultiHeadAttention("att", Node("att.norm", LayerNorm(h)), heads=4, key_dim=16, window=(10, 10))
    return Network(LogSoftmax(Node("output", Affine(Node("res", h + Affine(a, cells)), OUTPUTS))), seed=0)


def timed(fn: Callable[[], Any], rounds: int) -> tuple[float, Any, int, float]:
    """(median seconds of `rounds` calls, the last result, programs the first call compiled, its seconds)."""
    symnet.clear_caches()
    start = time.perf_counter()
    with record() as ran:
        out = fn()
    first = time.perf_counter() - start
    compiled = len({id(c) for c in ran.computations})
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        out = fn()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), out, compiled, first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--utterances", type=int, default=200)
    parser.add_argument("--cells", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    symnet.tune_host_memory()
    rng = np.random.default_rng(0)
    feats = [rng.standard_normal((int(n), FEATURES)).astype(np.float32) for n in rng.integers(80, 601, args.utterances)]
    frames = sum(len(f) for f in feats)
    net = blstm(args.cells)
    print(f"{args.utterances} utterances, {frames} frames; 2-layer BLSTM of {args.cells} cells (projection half)")
    print("| computed | frames/s | / reference | programs compiled |")
    print("|---|---|---|---|")
    default = buckets.BATCH_FRAMES
    rows = {}
    for batch_frames in (1024, default):
        buckets.BATCH_FRAMES = batch_frames
        rows[batch_frames] = timed(lambda: net.compute(feats), args.rounds)
    buckets.BATCH_FRAMES = default
    reference = rows[1024][0]
    for batch_frames, (seconds, _, compiled, _) in rows.items():
        row = f"whole, calls of {batch_frames} frames"
        print(f"| {row} | {frames / seconds:,.0f} | {reference / seconds:.2f} | {compiled} |")
    seconds, chunked, compiled, _ = timed(
        lambda: net.compute(
            feats, frames_per_chunk=50, carry_state=False, extra_left_context=20, extra_right_context=20
        ),
        args.rounds,
    )
    print(f"| chunks of 50 on their own | {frames / seconds:,.0f} | {reference / seconds:.2f} | {compiled} |")
    whole = rows[default][1]
    difference = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(whole, chunked))
    print(f"largest difference between the chunked and whole outputs: {difference:.2f}")
    net = attention(args.cells)
    graph = Graph(dict(net.structure.outputs))
    summed = sum(layer.time_reach() for layer in graph.layers if isinstance(layer, Descriptor))
    print(f"its reach (time_reach): {time_reach(graph)} frames; the sum of every time-moving read: {summed}")
    later, _, _, first = timed(lambda: net.compute(feats), args.rounds)
    print(f"bidirectional GRU + windowed attention: first call {first:.1f} s, later calls {later:.2f} s")


if __name__ == "__main__":
    main()
