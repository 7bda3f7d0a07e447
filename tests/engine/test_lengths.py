"""Sequence ends: one padded request with each sequence's end equals computing every sequence alone.

Networks whose optional reads (IfDefined, Failover) can see past a sequence's
end (a BLSTM, optional reads outside a recurrence) are padded at the end and
given each sequence's end (`ComputationRequest(sequence_ends=True)`), so that
`Network.compute` compiles a few programs for any set of lengths. The
reference is always each sequence computed on its own, in a request of exactly
its frames.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import nets
from helpers.compiles import count_compilations
from symnet import (
    Append,
    ComputationRequest,
    DimRange,
    Failover,
    IfDefined,
    IndexSet,
    Input,
    Network,
    Node,
    Normal,
    Offset,
    PlanError,
    Ref,
    ReLU,
    Sigmoid,
    Sum,
    Tanh,
    Weight,
    clear_caches,
    compile,
)
from symnet._src.engine.buckets import BUCKETS, bucket_length, padding_side
from symnet._src.engine.graph import Graph
from symnet._src.engine.plan import time_reach

D, C = 3, 5
x = Input("input", D)
rng = np.random.default_rng(1)


def weight(name: str, rows: int, cols: int) -> Weight:
    return Weight(Normal((rows, cols), 0.5), name=name)


def lstm(name: str, inp: object, dim: int, lag: int) -> Node:
    """An LSTM reading itself `lag` frames away through IfDefined (+1: the backward half of a BLSTM)."""
    gates = inp @ weight(f"{name}.wx", dim, 4 * C) + IfDefined(Offset(Ref(f"{name}.h"), lag)) @ weight(
        f"{name}.wh", C, 4 * C
    )
    i, f = Sigmoid(DimRange(gates, 0, C)), Sigmoid(DimRange(gates, C, C))
    g, o = Tanh(DimRange(gates, 2 * C, C)), Sigmoid(DimRange(gates, 3 * C, C))
    c = Node(f"{name}.c", f * IfDefined(Offset(Ref(f"{name}.c"), lag)) + i * g)
    return Node(f"{name}.h", o * Tanh(c))


def blstm() -> Network:
    """Both directions on spliced input, then a layer with right context 2: in a sequence's own request the
    backward LSTM starts past its last frame (from repeated edge frames), as Kaldi computes it."""
    spliced = Append(Offset(x, -1), x, Offset(x, 1))
    h = Append(lstm("fw", spliced, 3 * D, -1), lstm("bw", spliced, 3 * D, +1))
    return Network({"output": Append(Offset(h, -1), h, Offset(h, 2)) @ weight("out", 6 * C, 4)})


def optional_reads() -> Network:
    """IfDefined and Failover outside any recurrence, reading later and earlier frames."""
    h = Node(
        "h",
        ReLU(Append(x, IfDefined(Offset(x, 4)), Failover(Offset(x, 3), x)) @ weight("w1", 3 * D, C)),
    )
    return Network({"output": Append(h, IfDefined(Offset(h, -3)), IfDefined(Offset(h, 2))) @ weight("w2", 3 * C, 4)})


def window() -> Network:
    """A window of parallel optional reads (as attention's) over a BLSTM: its reach is the widest read, 6
    frames, past a recurrence (1 frame each way, through h and c: 2), not the sum of them all (46)."""
    h = Append(lstm("fw", x, D, -1), lstm("bw", x, D, +1))
    reads = [IfDefined(Offset(h, o)) for o in range(-6, 7) if o]
    return Network({"output": Append(h, Sum(*reads)) @ weight("out", 4 * C, 4)})


def tdnn() -> Network:
    return nets.tdnn(x, hidden=C, out=4, first=(-2, 0, 2), second=(-1, 0, 3), names=("w1", "w2"), node="h")


def alone(net: Network, seq: np.ndarray, params: Mapping[str, Any] | None = None, lowering: str = "auto") -> jax.Array:
    """One sequence's output frames from a request of exactly its frames and context (edge frames repeated)."""
    left, right = net.context()
    in_t = (-left, len(seq) + right)
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=1, t=in_t)}, outputs={"output": IndexSet.range(n=1, t=len(seq))}
    )
    block = seq[np.clip(np.arange(*in_t), 0, len(seq) - 1)]
    if params is None:
        return compile(net, request, lowering)(net, {"input": block})["output"]
    return compile(net, request, lowering).forward(net.replace(params=params), {"input": block})["output"].value


def blstm_reference(net: Network, seq: np.ndarray) -> np.ndarray:
    """`blstm()` on one sequence alone, in numpy: the spliced input exists from frame 1 - left to
    len + right - 2 (edge frames repeated), each LSTM runs over all of those frames from zeros."""
    left, right = net.context()
    p = {k: np.asarray(v, np.float64) for k, v in net.params.items()}
    frames = np.arange(1 - left, len(seq) + right - 1)
    xs = seq[np.clip(np.concatenate([frames[:1] - 1, frames, frames[-1:] + 1]), 0, len(seq) - 1)]
    spliced = np.concatenate([xs[:-2], xs[1:-1], xs[2:]], axis=1)

    def run(name: str, order: np.ndarray) -> np.ndarray:
        h, c, out = np.zeros(C), np.zeros(C), np.zeros((len(frames), C))
        sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
        for k in order:
            g = spliced[k] @ p[f"{name}.wx"] + h @ p[f"{name}.wh"]
            c = sig(g[C : 2 * C]) * c + sig(g[:C]) * np.tanh(g[2 * C : 3 * C])
            h = out[k] = sig(g[3 * C :]) * np.tanh(c)
        return out

    h = np.concatenate([run("fw", np.arange(len(frames))), run("bw", np.arange(len(frames))[::-1])], axis=1)
    at = -frames[0] + np.arange(len(seq))  # row of frame t
    return np.concatenate([h[at - 1], h[at], h[at + 2]], axis=1) @ p["out"]


def test_blstm_reference_is_the_sequence_computed_alone() -> None:
    net = blstm()
    for seq in sequences([1, 2, 7]):
        np.testing.assert_allclose(blstm_reference(net, seq), alone(net, seq), rtol=1e-5, atol=1e-5)


def sequences(lengths: list[int]) -> list[np.ndarray]:
    return [rng.standard_normal((n, D)).astype(np.float32) for n in lengths]


def padded_request(net: Network, seqs: list[np.ndarray], frames: int) -> tuple[ComputationRequest, dict, list[int]]:
    """All `seqs` padded at the end to `frames` frames in one request with sequence ends; its inputs and ends."""
    left, right = net.context()
    in_t = (-left, frames + right)
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=len(seqs), t=in_t)},
        outputs={"output": IndexSet.range(n=len(seqs), t=frames)},
        sequence_ends=True,
    )
    block = np.stack([s[np.clip(np.arange(*in_t), 0, len(s) - 1)] for s in seqs], axis=1)
    return request, {"input": block.reshape(-1, D)}, [len(s) + right for s in seqs]


NETWORKS = {"blstm": blstm, "optional reads": optional_reads, "tdnn": tdnn, "window": window}


@pytest.mark.parametrize(
    ("make", "side"), [(blstm, "ends"), (optional_reads, "ends"), (tdnn, "end"), (window, "ends")], ids=list(NETWORKS)
)
def test_padding_side(make: Callable[[], Network], side: str) -> None:
    assert padding_side(Graph(dict(make().structure.outputs)), with_ends=True) == side


@pytest.mark.parametrize("make", list(NETWORKS.values()), ids=list(NETWORKS))
def test_compute_equals_each_sequence_alone(make: Callable[[], Network]) -> None:
    net = make()
    # `alone` compiles a program per length: fewer lengths for the window, whose programs are the slowest to build
    seqs = sequences([1, 2, *rng.integers(1, 601, size=10 if make is window else 38).tolist()])
    reference = blstm_reference if make is blstm else alone  # the same (tested above), without 40 compilations
    for seq, got in zip(seqs, net.compute(seqs), strict=True):
        assert got.shape[0] == len(seq)
        np.testing.assert_allclose(got, reference(net, seq), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make", [blstm, optional_reads], ids=["blstm", "optional reads"])
def test_one_request_serves_every_set_of_ends(make: Callable[[], Network]) -> None:
    net = make()
    seqs = sequences([1, 4, 7, 12])
    request, inputs, ends = padded_request(net, seqs, 12)
    computation = compile(net, request)
    out = np.asarray(computation(net, inputs, ends=ends)["output"]).reshape(12, len(seqs), -1)
    for j, seq in enumerate(seqs):
        np.testing.assert_allclose(out[: len(seq), j], alone(net, seq), rtol=1e-5, atol=1e-5)
    left, right = net.context()
    with count_compilations() as compiled:  # other ends: the same program
        out = np.asarray(computation(net, inputs, ends=[3 + right] * len(seqs))["output"]).reshape(12, len(seqs), -1)
    assert compiled == []
    block = inputs["input"].reshape(-1, len(seqs), D)
    alone_3 = ComputationRequest(
        inputs={"input": IndexSet.range(n=1, t=(-left, 3 + right))}, outputs={"output": IndexSet.range(n=1, t=3)}
    )
    for j in range(len(seqs)):  # each sequence's given frames before its end, alone
        want = compile(net, alone_3)(net, {"input": block[: left + 3 + right, j]})["output"]
        np.testing.assert_allclose(out[:3, j], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make", [blstm, optional_reads], ids=["blstm", "optional reads"])
def test_gradients_equal_those_of_each_sequence_alone(make: Callable[[], Network]) -> None:
    net = make()
    lengths = [2, 9, 5, 12]
    seqs = sequences(lengths)
    request, inputs, ends = padded_request(net, seqs, 12)
    computation = compile(net, request)
    delta = rng.standard_normal((12, len(seqs), 4)).astype(np.float32)
    delta[np.arange(12)[:, None] >= np.array(lengths)[None, :]] = 0  # frames past each end are dropped

    def padded_loss(params: dict) -> jax.Array:
        out = computation.forward(net.replace(params=params), inputs, ends=ends)["output"].value
        return (out * delta.reshape(-1, 4)).sum()

    def reference_loss(params: dict) -> jax.Array:
        total = jnp.zeros(())
        for j, seq in enumerate(seqs):  # JAX's own differentiation of the scans
            total = total + (alone(net, seq, params, lowering="plain") * delta[: len(seq), j]).sum()
        return total

    got = jax.jit(jax.grad(padded_loss))(net.params)
    want = jax.jit(jax.grad(reference_loss))(net.params)
    tape = computation.forward(net, inputs, ends=ends)["output"].backward(jnp.asarray(delta.reshape(-1, 4)))
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(tape[name], want[name], rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize(
    "make", [pytest.param(blstm, marks=pytest.mark.slow), optional_reads], ids=["blstm", "optional reads"]
)
def test_at_most_eight_compilations_for_any_lengths(make: Callable[[], Network]) -> None:
    net = make()
    lengths = [1, 2000, *(b - 1 for b in BUCKETS), *rng.integers(1, 2001, size=30).tolist()]  # every bucket
    seqs = sequences(lengths)
    clear_caches()
    with count_compilations() as compiled:
        first = net.compute(seqs)
    assert 1 <= len(compiled) <= 8, compiled  # one batch size per bucket in a call: one program per bucket
    others = [int(rng.integers(b - 127 if b > 128 else 1, b + 1)) for b in map(bucket_length, lengths)]
    with count_compilations() as again:  # other lengths, as many per bucket: the same programs
        net.compute(sequences(others))
    assert again == []
    for i in (0, 2, 3):  # 1, 127 and 255 frames
        np.testing.assert_allclose(first[i], alone(net, seqs[i]), rtol=1e-5, atol=1e-5)


def test_the_reach_of_parallel_reads_is_the_widest() -> None:
    assert time_reach(Graph(dict(window().structure.outputs))) == 2 + 6
    assert time_reach(Graph(dict(blstm().structure.outputs))) == 1 + 2 + 2  # splice, LSTM, output splice


@pytest.mark.parametrize(
    "make",
    [blstm, optional_reads, pytest.param(window, marks=pytest.mark.slow)],
    ids=["blstm", "optional reads", "window"],
)
def test_masks_of_far_ends_equal_planned_ones(make: Callable[[], Network]) -> None:
    net = make()
    request, _, _ = padded_request(net, sequences([1]), 90)
    ends = compile(net, request).sequence_ends
    assert ends is not None and ends.local
    assert ends.near + ends.modulus + 10 < ends.wanted_end  # ends derived from the reference's masks are tested
    # every end up to past the masks' near part and its first period, and past the last; every fifth between
    dense = ends.near + ends.modulus + 10
    for end in (e for e in range(ends.first, ends.last + 3) if e <= dense or e >= ends.last - 2 or e % 5 == 0):
        for got, want in zip(ends._one(end), ends._planned(min(end, ends.last)), strict=True):
            np.testing.assert_array_equal(got, want, err_msg=f"end {end}")


def test_ends_are_checked() -> None:
    net = blstm()
    seqs = sequences([3, 4])
    request, inputs, ends = padded_request(net, seqs, 4)
    computation = compile(net, request)
    for bad in (None, [3], [3.5, 4], "ab"):
        with pytest.raises(PlanError, match="ends"):
            computation(net, inputs, ends=bad)
    plain = ComputationRequest(inputs=request.inputs, outputs=request.outputs)
    with pytest.raises(PlanError, match="no sequence_ends"):
        compile(net, plain)(net, inputs, ends=ends)
    irregular = ComputationRequest(
        inputs={"input": IndexSet.of([(0, t) for t in range(-2, 9)] + [(1, 0)])},
        outputs={"output": IndexSet.of([(0, 0), (0, 1)])},
        sequence_ends=True,
    )
    with pytest.raises(PlanError, match="sequence_ends must be regular"):
        compile(tdnn(), irregular)
