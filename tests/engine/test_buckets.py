"""Inference compiles once per shape class: sequences padded to bucket lengths give the unpadded outputs."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from helpers import nets
from helpers.compiles import count_compilations
from symnet import (
    Append,
    ComputationRequest,
    IfDefined,
    IndexSet,
    Input,
    Network,
    Normal,
    Offset,
    Round,
    Weight,
    clear_caches,
    compile,
)
from symnet._src.engine.buckets import BUCKETS, bucket_length, fill, padding_side
from symnet._src.engine.graph import Graph
from symnet._src.kaldi.nnet3_compute import ComputeOptions, Nnet3Computer

D, H = 3, 4
x = Input("input", D)
rng = np.random.default_rng(0)


def tdnn() -> Network:
    return nets.tdnn(x, hidden=H, out=H, first=(-2, 0, 2), second=(-1, 0, 3), names=("w1", "w2"), node="h")


def spliced() -> Append:
    return Append(Offset(x, -1), x, Offset(x, 2))  # right context, so the last outputs read past the end


def forward_rnn() -> Network:
    return Network({"output": nets.rnn(spliced(), 3 * D, H, lag=-1, name="f")})


def backward_rnn() -> Network:
    return Network({"output": nets.rnn(spliced(), 3 * D, H, lag=+1, name="b")})


def bidirectional() -> Network:
    forward, backward = nets.rnn(spliced(), 3 * D, H, lag=-1, name="f"), nets.rnn(spliced(), 3 * D, H, lag=+1, name="b")
    return Network({"output": Append(forward, backward)})


def backward_with_modulus() -> Network:
    return Network({"output": nets.rnn(Round(spliced(), 3), 3 * D, H, lag=+1, name="b")})


def unpadded(net: Network, seq: np.ndarray, mode: str = "same", first: int = 0, count: int | None = None) -> np.ndarray:
    """Output frames `first .. first + count` of one sequence from one request of exactly those frames and their
    context (edge frames repeated) in 'same' mode, or of the sequence's frames in 'valid' mode."""
    left, right = net.context()
    count = len(seq) - first if count is None else count
    in_t, out_t = ((-left, count + right), (0, count)) if mode == "same" else ((0, len(seq)), (left, len(seq) - right))
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=1, t=in_t)}, outputs={"output": IndexSet.range(n=1, t=out_t)}
    )
    block = seq[np.clip(first + np.arange(*in_t), 0, len(seq) - 1)]
    return np.asarray(compile(net, request)(net, {"input": block})["output"])


def sequences(lengths: list[int]) -> list[np.ndarray]:
    return [rng.standard_normal((n, D)).astype(np.float32) for n in lengths]


def test_bucket_lengths() -> None:
    assert [bucket_length(n) for n in (1, 128, 129, 2000, 2048, 2049)] == [128, 128, 256, 2048, 2048, 4096]
    assert bucket_length(100, 3) == 129
    assert len(BUCKETS) == 8
    assert fill([1, 2, 3], 2) == [[1, 2], [3, 3]]


@pytest.mark.parametrize(
    ("make", "side"),
    [
        (tdnn, "end"),
        (forward_rnn, "end"),
        (backward_rnn, "start"),
        (bidirectional, "ends"),
        (backward_with_modulus, "start"),
    ],
)
def test_padding_side(make: Callable[[], Network], side: str | None) -> None:
    graph = Graph(dict(make().structure.outputs))
    assert padding_side(graph, with_ends=True) == side
    assert padding_side(graph) == (None if side == "ends" else side)  # for callers that cannot give ends


def test_a_free_optional_read_is_padded_with_each_sequence_end() -> None:
    net = Network({"output": Append(x, IfDefined(Offset(x, 5))) @ Weight(Normal((2 * D, H), 0.5), name="w")})
    assert padding_side(Graph(dict(net.structure.outputs)), with_ends=True) == "ends"
    seqs = sequences([9, 12])
    for seq, got in zip(seqs, net.compute(seqs), strict=True):
        np.testing.assert_allclose(got, unpadded(net, seq), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("make", [tdnn, forward_rnn, backward_rnn, bidirectional, backward_with_modulus])
def test_bucketed_outputs_equal_unpadded(make: Callable[[], Network]) -> None:
    net = make()
    seqs = sequences([1, 2, 5, 17, 127, 128, 129, 300])
    got = net.compute(seqs)
    for seq, out in zip(seqs, got, strict=True):
        assert out.shape[0] == len(seq)
        np.testing.assert_allclose(out, unpadded(net, seq), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", [tdnn, backward_rnn])
def test_valid_mode_is_unchanged(make: Callable[[], Network]) -> None:
    net = make()
    seqs = sequences([9, 40, 200])
    for seq, out in zip(seqs, net.compute(seqs, mode="valid"), strict=True):
        np.testing.assert_allclose(out, unpadded(net, seq, "valid"), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", [tdnn, forward_rnn, backward_rnn])
def test_at_most_eight_compilations_for_any_lengths(make: Callable[[], Network]) -> None:
    net = make()
    lengths = [1, 2000, *(b - 1 for b in BUCKETS), *rng.integers(1, 2001, size=30).tolist()]  # every bucket
    seqs = sequences(lengths)
    clear_caches()
    with count_compilations() as compiled:
        first = net.compute(seqs)
    assert 1 <= len(compiled) <= 8, compiled
    with count_compilations() as again:
        net.compute(sequences(rng.integers(1, 2001, size=20).tolist()))
    assert again == []
    for i in (0, 1, 2):
        np.testing.assert_allclose(first[i], unpadded(net, seqs[i]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", [tdnn, forward_rnn, backward_rnn])
def test_nnet3_compute_many_compiles_once_per_chunk_shape(make: Callable[[], Network]) -> None:
    net = make()
    lengths = rng.integers(1, 2001, size=30).tolist()
    feats = sequences(lengths)
    computer = Nnet3Computer(net, ComputeOptions(frames_per_chunk=50))
    clear_caches()
    with count_compilations() as compiled:
        got = computer.compute_many(feats)
    assert 1 <= len(compiled) <= 8, compiled
    for seq, out in zip(feats[:5], got[:5], strict=True):  # each chunk of 50 its own computation, as Kaldi does
        want = np.concatenate(
            [unpadded(net, seq, first=s, count=min(50, len(seq) - s)) for s in range(0, len(seq), 50)]
        )
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)  # batched matmuls round differently
