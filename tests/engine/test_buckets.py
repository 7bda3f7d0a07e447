"""Inference compiles once per shape class: sequences padded to bucket lengths give the unpadded outputs."""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
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
    Node,
    Normal,
    Offset,
    Round,
    Weight,
    clear_caches,
    compile,
)
from symnet._src.engine.buckets import BATCH_FRAMES, BUCKETS, batch_size, batches, bucket_length, fill, padding_side
from symnet._src.engine.context import modulus
from symnet._src.engine.graph import Graph
from symnet._src.kaldi.compute.nnet3_compute import ComputeOptions, Nnet3Computer
from symnet.components import set_test_mode
from symnet.errors import PlanError
from symnet.kaldi import COMPONENTS
from symnet.layers import BatchNorm

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


def test_batch_sizes_are_powers_of_two_up_to_the_frames_of_a_call() -> None:
    largest = BATCH_FRAMES // 128
    assert [batch_size(128, n) for n in (1, 2, 3, 5, largest, largest + 1, 10 * largest)] == [
        1,
        2,
        4,
        8,
        largest,
        largest,
        largest,
    ]
    assert batch_size(10 * BATCH_FRAMES, 5) == 1  # a sequence longer than a call's frames computes alone
    assert batches(["a"], 128) == [["a"]]  # one sequence: no copies of it computed
    assert batches(list(range(5)), 128) == [[0, 1, 2, 3, 4, 4, 4, 4]]


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


#: One-directional recurrences: make test-all alone (make test has the bidirectional layer, which has both).
ONE_WAY = [pytest.param(make, marks=pytest.mark.slow) for make in (forward_rnn, backward_rnn)]


@pytest.mark.parametrize("make", [tdnn, *ONE_WAY, bidirectional, backward_with_modulus])
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
    assert 1 <= len(compiled) <= 8, compiled  # one batch size per bucket in a call: one program per bucket
    others = [int(rng.integers(b - 127 if b > 128 else 1, b + 1)) for b in map(bucket_length, lengths)]
    assert list(map(bucket_length, others)) == list(map(bucket_length, lengths))
    with count_compilations() as again:  # other lengths, as many per bucket: the same programs
        net.compute(sequences(others))
    assert again == []
    for i in (0, 1, 2):  # 2,000 frames of float32 recurrence (values near 1) in two programs: rounding to 1e-5
        np.testing.assert_allclose(first[i], unpadded(net, seqs[i]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make", [tdnn, forward_rnn, backward_rnn, bidirectional])
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


def stats() -> Network:
    """Kaldi's statistics extraction and pooling: IndexedLayers, which no padding leaves unchanged."""
    ext = Node(
        "ext",
        COMPONENTS["StatisticsExtractionComponent"](
            "ext", {"input-dim": D, "input-period": 1, "output-period": 1, "include-variance": True}, x
        ),
    )
    pool = COMPONENTS["StatisticsPoolingComponent"](
        "pool",
        {"input-dim": 2 * D + 1, "input-period": 1, "left-context": 3, "right-context": 4, "output-stddevs": True},
        ext,
    )
    return Network({"output": pool})


def alone(net: Network, seq: np.ndarray, start: int, count: int, extra: tuple[int, int]) -> np.ndarray:
    """Output frames `start .. start + count` of one sequence computed on their own, as nnet3-compute computes a
    chunk: one request of exactly those frames, the context and `extra` context, edge frames repeated, in time
    shifted by a multiple of the network's modulus."""
    left, right = net.context()
    left, right = left + extra[0], right + extra[1]
    phase = start % modulus(Graph(dict(net.structure.outputs)))
    in_t = (phase - left, phase + count + right)
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=1, t=in_t)}, outputs={"output": IndexSet.range(n=1, t=(phase, phase + count))}
    )
    block = seq[np.clip(start - phase + np.arange(*in_t), 0, len(seq) - 1)]
    return np.asarray(compile(net, request)(net, {"input": block})["output"])


@pytest.mark.parametrize("make", [tdnn, *ONE_WAY, bidirectional, backward_with_modulus, stats])
def test_chunks_on_their_own_are_batched_and_padded_without_changing_them(make: Callable[[], Network]) -> None:
    """carry_state=False: the chunks of every sequence are computed together, a short last chunk padded to the
    chunk size where padding changes none of its outputs; each equals the chunk computed alone."""
    net = make()
    seqs = sequences([1, 5, 7, 20, 23, 40])  # chunks of 7: full ones, and last ones of 1, 5, 6, 2 and 5 frames
    clear_caches()
    with count_compilations() as compiled:
        got = net.compute(seqs, frames_per_chunk=7, carry_state=False, extra_left_context=2, extra_right_context=3)
    graph = Graph(dict(net.structure.outputs))
    if padding_side(graph, with_ends=True) is not None and modulus(graph) == 1:
        assert len(compiled) == 1, compiled  # every chunk one shape, all in one call
    for seq, out in zip(seqs, got, strict=True):
        want = np.concatenate([alone(net, seq, s, min(7, len(seq) - s), (2, 3)) for s in range(0, len(seq), 7)])
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def batchnorm_net() -> Network:
    """A splice, an affine and a training-mode batch-norm: every output row depends on every row of the call."""
    return Network({"output": BatchNorm(Node("h", spliced() @ Weight(Normal((3 * D, H), 0.5), name="w")))})


def test_a_minibatch_normalisation_gets_exactly_the_rows_of_the_sequences_given() -> None:
    """Training-mode batch-norm: no padding frames or repeated sequences enter its statistics, so `compute`
    equals one request of exactly the sequences' frames and context, and the same frames traced."""
    net = batchnorm_net()
    assert padding_side(Graph(dict(net.structure.outputs)), with_ends=True) is None
    xs = rng.standard_normal((3, 15, D)).astype(np.float32)
    left, right = net.context()
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=3, t=(-left, 15 + right))}, outputs={"output": IndexSet.range(n=3, t=15)}
    )
    block = xs[:, np.clip(np.arange(-left, 15 + right), 0, 14)].transpose(1, 0, 2)  # [T, N, D]
    want = np.asarray(compile(net, request)(net, {"input": block.reshape(-1, D)})["output"]).reshape(15, 3, H)
    train = functools.partial(net.compute, test_mode=False)
    np.testing.assert_allclose(np.asarray(train(xs)), want.transpose(1, 0, 2), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(jax.jit(train)(xs)), want.transpose(1, 0, 2), rtol=1e-5, atol=1e-5)


def test_a_minibatch_normalisation_refuses_what_would_change_its_minibatch() -> None:
    net = batchnorm_net()
    ragged = sequences([5, 9])
    with pytest.raises(PlanError, match=r"BatchNorm.*minibatch.*2 lengths.*test mode \(the default"):
        net.compute(ragged, test_mode=False)
    with pytest.raises(PlanError, match=r"BatchNorm.*minibatch.*2 lengths"):
        jax.jit(lambda a, b: net.compute([a, b], test_mode=False))(*ragged)
    with pytest.raises(PlanError, match=r"BatchNorm.*each chunk would be a minibatch"):
        net.compute(sequences([9]), frames_per_chunk=4, carry_state=False, test_mode=False)
    tested = set_test_mode(net)  # stored statistics: rows are independent, sequences padded as usual
    assert padding_side(Graph(dict(tested.structure.outputs)), with_ends=True) == "end"
    for seq, out in zip(ragged, tested.compute(ragged), strict=True):
        want = unpadded(tested, seq)  # outputs up to 100: float32's roundoff is relative to the largest
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-7 * np.abs(want).max())
