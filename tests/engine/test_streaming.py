"""symnet.Stream and compute(frames_per_chunk=...) against the one-pass computation, and their compile counts."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.compiles import count_compilations
from helpers.nets import tdnn
from symnet import (
    Append,
    IfDefined,
    Input,
    Network,
    Node,
    Normal,
    Offset,
    PlanError,
    Ref,
    ReLU,
    Round,
    ShapeError,
    Sigmoid,
    Stream,
    Tanh,
    Weight,
    clear_caches,
)
from symnet._src.engine.streaming import chunk_runner
from symnet.errors import ArgumentTypeError, StreamError
from symnet.layers import LSTM, Bidirectional

D = 3
x = Input("input", D)
rng = np.random.default_rng(0)


def lstm_like() -> Network:
    """A gated forward recurrence (IfDefined(Offset(Ref(...), -1))) after a TDNN layer; the output also reads
    the recurrence two frames back, so more than its one frame of lag must be carried."""
    a = Node("a", ReLU(Append(Offset(x, -1), x, Offset(x, 1)) @ Weight(Normal((3 * D, 5), 0.5))))
    prev_c, prev_m = IfDefined(Offset(Ref("c"), -1)), IfDefined(Offset(Ref("m"), -1))
    gates = Append(a, prev_m)
    i = Sigmoid(gates @ Weight(Normal((9, 4), 0.5)))
    f = Sigmoid(gates @ Weight(Normal((9, 4), 0.5)))
    c = Node("c", f * prev_c + i * Tanh(gates @ Weight(Normal((9, 4), 0.5))))
    m = Node("m", Tanh(c) * Sigmoid(gates @ Weight(Normal((9, 4), 0.5))))
    return Network({"output": Append(Offset(m, -2), m) @ Weight(Normal((8, 3), 0.5))})


def subsampled() -> Network:
    """Round (modulus 3) and an IfDefined outside any recurrence, which reads beyond the context."""
    h = Node("s", ReLU(Append(Round(x, 3), x) @ Weight(Normal((2 * D, 5), 0.5))))
    return Network({"output": Append(h, IfDefined(Offset(h, 4)), Offset(h, -3)) @ Weight(Normal((15, 2), 0.5))})


NETWORKS = {
    # unnamed Weights: h1.weight and weight, which tdnn_reference reads
    "tdnn": tdnn(x, hidden=6, out=4, first=(-2, 0, 2), second=(-1, 0, 3), node="h1"),
    "lstm_like": lstm_like(),
    "subsampled": subsampled(),
}


def feed_all(stream: Stream, xs: np.ndarray, sizes: list[int]) -> np.ndarray:
    """Everything the stream returns for `xs` fed in pieces of `sizes` (time is axis -2), then finish()."""
    parts, start = [], 0
    for size in sizes:
        parts.append(np.asarray(stream.feed(xs[..., start : start + size, :])))
        start += size
    assert start == xs.shape[-2]
    parts.append(np.asarray(stream.finish()))
    return np.concatenate(parts, axis=-2)


def random_sizes(total: int, high: int) -> list[int]:
    sizes: list[int] = []
    while sum(sizes) < total:
        sizes.append(min(int(rng.integers(1, high)), total - sum(sizes)))
    return sizes


def tdnn_reference(net: Network, xs: np.ndarray) -> np.ndarray:
    """The TDNN in numpy, edge frames repeated (compute's mode='same'): h on frames -1..T+2 from clipped frames."""
    w1, w2 = np.asarray(net.params["h1.weight"]), np.asarray(net.params["weight"])
    frames = np.arange(-1, len(xs) + 3)
    h = np.maximum(np.concatenate([xs[np.clip(frames + k, 0, len(xs) - 1)] for k in (-2, 0, 2)], axis=1) @ w1, 0)
    t = np.arange(len(xs)) + 1  # row of frame t in h
    return np.concatenate([h[t - 1], h[t], h[t + 3]], axis=1) @ w2


def test_tdnn_reference_is_the_one_pass() -> None:
    net, xs = NETWORKS["tdnn"], rng.standard_normal((23, D)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(net.compute(xs[None]))[0], tdnn_reference(net, xs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", NETWORKS)
@pytest.mark.parametrize("feeds", ["one frame at a time", "odd sizes", "whole utterance"])
@pytest.mark.parametrize("chunk", [3, 6, 12])
def test_stream_equals_one_pass(name: str, feeds: str, chunk: int) -> None:
    net = NETWORKS[name]
    xs = rng.standard_normal((41, D)).astype(np.float32)
    sizes = {"one frame at a time": [1] * 41, "odd sizes": random_sizes(41, 10), "whole utterance": [41]}[feeds]
    got = feed_all(Stream(net, frames_per_chunk=chunk), xs, sizes)
    np.testing.assert_allclose(got, np.asarray(net.compute(xs[None]))[0], rtol=1e-5, atol=1e-5)
    if name == "tdnn":
        np.testing.assert_allclose(got, tdnn_reference(net, xs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", NETWORKS)
def test_parallel_streams(name: str) -> None:
    net = NETWORKS[name]
    xs = rng.standard_normal((3, 29, D)).astype(np.float32)
    got = feed_all(Stream(net, frames_per_chunk=6), xs, random_sizes(29, 8))
    assert got.shape[:2] == (3, 29)
    np.testing.assert_allclose(got, np.asarray(net.compute(xs)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("length", [1, 2, 5, 13])
@pytest.mark.parametrize("name", NETWORKS)
def test_short_utterances(name: str, length: int) -> None:
    net = NETWORKS[name]
    xs = rng.standard_normal((length, D)).astype(np.float32)
    got = feed_all(Stream(net, frames_per_chunk=6), xs, [length])
    np.testing.assert_allclose(got, np.asarray(net.compute(xs[None]))[0], rtol=1e-5, atol=1e-5)


def test_frames_come_out_once_their_lookahead_has_arrived() -> None:
    net = NETWORKS["lstm_like"]
    stream, chunk = Stream(net, frames_per_chunk=4), 4
    runner = chunk_runner(net, None, chunk)
    assert stream.lookahead == runner.right == 1  # the forward recurrence's IfDefined needs no extra frames
    xs = rng.standard_normal((30, D)).astype(np.float32)
    total = 0
    for t in range(30):
        total += len(stream.feed(xs[t : t + 1]))
        complete = (t + 1 - stream.lookahead) // chunk * chunk  # whole chunks with their lookahead in
        assert total == max(complete, 0)
    assert total + len(stream.finish()) == 30


def test_finish_and_reset_start_a_new_utterance() -> None:
    net = NETWORKS["lstm_like"]
    stream = Stream(net, frames_per_chunk=3)
    first, second = (rng.standard_normal((n, D)).astype(np.float32) for n in (17, 11))
    np.testing.assert_allclose(
        feed_all(stream, first, [5, 12]), np.asarray(net.compute(first[None]))[0], rtol=1e-5, atol=1e-5
    )
    # the utterance is over: more frames would be taken for a new one, so they are refused until reset()
    with pytest.raises(StreamError, match=r"feed\(\) after finish\(\): the utterance is over; call reset\(\)"):
        stream.feed(second[:4])
    with pytest.raises(StreamError, match=r"finish\(\) after finish\(\)"):
        stream.finish()
    stream.reset()
    np.testing.assert_allclose(
        feed_all(stream, second, [11]), np.asarray(net.compute(second[None]))[0], rtol=1e-5, atol=1e-5
    )
    stream.reset()
    stream.feed(first)
    stream.reset()
    np.testing.assert_allclose(
        feed_all(stream, second, [4, 7]), np.asarray(net.compute(second[None]))[0], rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("name", NETWORKS)
@pytest.mark.parametrize("chunk", [1, 4, 7])
def test_compute_in_chunks_equals_one_pass(name: str, chunk: int) -> None:
    net = NETWORKS[name]
    xs = rng.standard_normal((2, 33, D)).astype(np.float32)
    np.testing.assert_allclose(
        np.asarray(net.compute(xs, frames_per_chunk=chunk)), np.asarray(net.compute(xs)), rtol=1e-5, atol=1e-5
    )


def test_chunks_on_their_own_are_shifted_copies_of_one_request() -> None:
    """carry_state=False: every full chunk is the first full chunk's computation at another start (a TDNN has
    no state, so with the whole context as extra context each chunk equals one pass)."""
    net = NETWORKS["tdnn"]
    xs = rng.standard_normal((1, 50, D)).astype(np.float32)
    got = np.asarray(net.compute(xs, frames_per_chunk=8, carry_state=False))
    np.testing.assert_allclose(got, np.asarray(net.compute(xs)), rtol=1e-5, atol=1e-5)


def stream_compilations(net: Network, frames: int) -> int:
    clear_caches()
    xs = rng.standard_normal((frames, D)).astype(np.float32)
    with count_compilations() as seen:
        feed_all(Stream(net, frames_per_chunk=6), xs, [7] * (frames // 7) + [frames % 7])
    return len(seen)


def compute_compilations(net: Network, frames: int, carry_state: bool = True, extra_left_context: int = 0) -> int:
    clear_caches()
    xs = rng.standard_normal((1, frames, D)).astype(np.float32)
    with count_compilations() as seen:
        net.compute(xs, frames_per_chunk=6, carry_state=carry_state, extra_left_context=extra_left_context)
    return len(seen)


# Programs per utterance: the TDNN's chunks are all one request (missing left frames and the last chunk's padding
# are repeated edge frames); the recurrence's first chunk has no state given; with optional reads beyond the
# context the first chunk is longer and the last runs to the end on exactly one pass's frames.
PROGRAMS = {"tdnn": 1, "lstm_like": 2, "subsampled": 3}


@pytest.mark.parametrize("name", NETWORKS)
def test_compile_count_does_not_grow_with_length(name: str) -> None:
    net = NETWORKS[name]
    assert stream_compilations(net, 200) == stream_compilations(net, 2000) == PROGRAMS[name]
    assert compute_compilations(net, 200) == compute_compilations(net, 2000) == PROGRAMS[name]
    # Chunks on their own: every full chunk is one program (6 is a multiple of every modulus here), and the
    # last, partial one (200 = 33 * 6 + 2 frames) is padded to the full chunk, which changes none of its outputs
    # (after its end; for the subsampled network's optional reads, with its end given): the same program.
    alone = compute_compilations(net, 200, carry_state=False, extra_left_context=4)
    assert alone == compute_compilations(net, 2000, carry_state=False, extra_left_context=4) == 1


def test_backward_recurrence_is_a_plan_error_naming_the_node() -> None:
    net = Network({"output": Node("bw", Tanh(x @ Weight(Normal((D, 4), 0.5)) + IfDefined(Offset(Ref("bw"), 1))))})
    with pytest.raises(PlanError, match=r"backward recurrence \(bw.*carry_state=False"):
        Stream(net, frames_per_chunk=5)


def test_a_long_backward_recurrence_is_named_in_one_short_line() -> None:
    """A typed BLSTM's backward direction has six named nodes, all built on one line: the message names three
    and where they were built, once."""
    net = Network({"output": Bidirectional(LSTM, "blstm1", x, cell=4, projection=2) @ Weight(Normal((4, 3), 0.5))})
    with pytest.raises(PlanError) as error:
        net.compute(np.zeros((1, 12, D), np.float32), frames_per_chunk=5)
    message = str(error.value)
    assert "backward recurrence (blstm1.backward." in message and " and 3 more, built at " in message, message
    assert message.count("built at") == 1, message


@pytest.mark.parametrize(
    ("chunk", "match"),
    [(0, "positive number"), (2.5, "positive number"), (True, "positive number"), (4, "multiple of .* modulus 3")],
)
def test_bad_chunk_sizes(chunk: object, match: str) -> None:
    with pytest.raises(PlanError, match=match):
        Stream(NETWORKS["subsampled"], frames_per_chunk=chunk)  # type: ignore[arg-type]


def test_bad_frames() -> None:
    stream = Stream(NETWORKS["tdnn"], frames_per_chunk=4)
    with pytest.raises(StreamError, match="finish\\(\\) before any frame"):
        stream.finish()
    with pytest.raises(ArgumentTypeError, match="the network must be a symnet Network, got str"):
        Stream("net", frames_per_chunk=4)  # type: ignore[arg-type]
    with pytest.raises(ShapeError, match="has 5 features, the network takes 3"):
        stream.feed(np.zeros((2, 5)))
    with pytest.raises(ShapeError, match=r"\[T_new, D\] or \[N, T_new, D\]"):
        stream.feed(np.zeros(3))
    with pytest.raises(ShapeError, match="array of numbers"):
        stream.feed("frames")
    with pytest.raises(PlanError, match=r"inputs \['ivector'\].*\['input'\]"):
        stream.feed({"ivector": np.zeros((2, 3))})
    stream.feed(np.zeros((2, 3)))
    with pytest.raises(ShapeError, match="earlier frames were \\[T_new, D\\]"):
        stream.feed(np.zeros((1, 2, 3)))
    parallel = Stream(NETWORKS["tdnn"], frames_per_chunk=4)
    parallel.feed(np.zeros((2, 3, 3)))
    with pytest.raises(ShapeError, match="do not continue the earlier frames \\(2 streams"):
        parallel.feed(np.zeros((3, 3, 3)))
