"""symnet._src.engine.runner: every way of running a network over sequences against the per-Index reference evaluator.

The network has a forward recurrence and an optional read outside it, so
bucketing pads with each sequence's own end (`Ends`) and chunks carry state and
see past their context; each mode is compared with the reference (one pass in
Kaldi's semantics, computed one Index at a time), not with another mode.
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers.reference import Reference
from symnet import Append, IfDefined, Input, Network, Node, Normal, Offset, PlanError, Ref, ReLU, Stream, Tanh, Weight
from symnet._src.core.index import Index
from symnet._src.engine.buckets import padding_side
from symnet._src.engine.graph import Graph
from symnet._src.engine.runner import Block, Ends, record, run, run_each

D = 3
x = Input("input", D)


def recurrent() -> Network:
    """A forward recurrence (IfDefined(Offset(Ref('h'), -1))) and an IfDefined read two frames ahead outside it."""
    a = Node("a", ReLU(Append(Offset(x, -1), x) @ Weight(Normal((2 * D, 5), 0.5))))
    h = Node("h", Tanh(Append(a, IfDefined(Offset(Ref("h"), -1))) @ Weight(Normal((9, 4), 0.5))))
    return Network({"output": Append(h, IfDefined(Offset(a, 2))) @ Weight(Normal((9, 2), 0.5))})


NET = recurrent()
LENGTHS = (5, 13, 22)


def sequences(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(n, D)).astype(np.float32) for n in LENGTHS]


def reference(net: Network, seq: np.ndarray) -> np.ndarray:
    """One pass in `mode='same'`: input frames -left .. T-1+right, edge frames repeated; output at 0 .. T-1."""
    left, right = net.context()
    t = np.arange(-left, len(seq) + right)
    rows = {Index(0, int(f)): seq[min(max(int(f), 0), len(seq) - 1)].astype(np.float64) for f in t}
    ref = Reference(net.outputs["output"], {"input": rows}, net.params, extra_roots=net.outputs.values())
    return np.stack([ref.value(Index(0, f)) for f in range(len(seq))])


@pytest.fixture(scope="module")
def want() -> list[np.ndarray]:
    return [reference(NET, s) for s in sequences()]


def test_the_network_pads_with_sequence_ends() -> None:
    assert padding_side(Graph(dict(NET.structure.outputs)), with_ends=True) == "ends"


@pytest.mark.parametrize("lowering", ["auto", "fused", "plain"])
def test_bucketed_matches_the_reference(want: list[np.ndarray], lowering: str) -> None:
    got = NET.compute(sequences(), lowering=lowering)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-4, atol=1e-5)


def test_chunks_with_state_match_the_reference(want: list[np.ndarray]) -> None:
    got = NET.compute(sequences(), frames_per_chunk=4, lowering="plain")
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-4, atol=1e-5)


def test_streaming_matches_the_reference(want: list[np.ndarray]) -> None:
    stream = Stream(NET, frames_per_chunk=4, lowering="fused")
    for seq, w in zip(sequences(), want, strict=True):
        parts = [np.asarray(stream.feed(seq[i : i + 3])) for i in range(0, len(seq), 3)]
        got = np.concatenate([*parts, np.asarray(stream.finish())])
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5)
        stream.reset()


def test_traced_whole_pass_matches_the_reference(want: list[np.ndarray]) -> None:
    import jax

    seq = sequences()[1]
    got = jax.jit(lambda v: NET.compute(v, lowering="plain"))(seq[None])
    np.testing.assert_allclose(np.asarray(got)[0], want[1], rtol=1e-4, atol=1e-5)


def test_chunks_on_their_own_restart_the_recurrence() -> None:
    """carry_state=False: each chunk of 6 frames is its own pass over its frames plus context (nnet3-compute)."""
    seq = sequences()[2]
    left, right = NET.context()
    got = np.asarray(NET.compute([seq], frames_per_chunk=6, carry_state=False, lowering="plain")[0])
    for start in range(0, len(seq), 6):
        end = min(start + 6, len(seq))
        frames = np.arange(start - left, end + right)
        rows = {Index(0, int(f)): seq[min(max(int(f), 0), len(seq) - 1)].astype(np.float64) for f in frames}
        ref = Reference(NET.outputs["output"], {"input": rows}, NET.params)
        np.testing.assert_allclose(
            got[start:end], np.stack([ref.value(Index(0, f)) for f in range(start, end)]), rtol=1e-4, atol=1e-5
        )


def test_record_shows_the_lowering_that_ran() -> None:
    with record() as ran:
        NET.compute(sequences()[:1], lowering="plain")
    assert ran.computations and all(c.lowering == "plain" for c in ran.computations)
    assert "plain scan" in ran.explain()
    with record() as ran:
        NET.compute(sequences()[:1], lowering="fused")
    assert "fused scan" in ran.explain() and "plain scan" not in ran.explain()
    assert "with sequence ends" in ran.explain()  # bucketed: this network pads with each sequence's end


def test_an_unknown_lowering_is_refused() -> None:
    with pytest.raises(PlanError, match="lowering='fast'"):
        NET.compute(sequences(), lowering="fast")
    with pytest.raises(PlanError, match="lowering='fast'"):
        Stream(NET, frames_per_chunk=4, lowering="fast")


def test_run_with_ends_matches_the_reference_of_each_sequence_alone() -> None:
    """Two sequences padded to 10 frames, ending at 6 and 10: each as the reference of its own frames."""
    seqs = sequences()
    a, b = seqs[1][:6], seqs[2][:10]
    block = np.stack([np.concatenate([a, np.repeat(a[-1:], 4, axis=0)]), b], axis=1)
    out = run(NET, {"input": Block((0, 10), block)}, {"output": (1, 10)}, ends=Ends((6, 10)))["output"]
    for j, seq in enumerate((a, b)):
        rows = {Index(0, t): seq[t].astype(np.float64) for t in range(len(seq))}
        ref = Reference(NET.outputs["output"], {"input": rows}, NET.params)
        want = np.stack([ref.value(Index(0, t)) for t in range(1, len(seq))])
        np.testing.assert_allclose(out[: len(seq) - 1, j], want, rtol=1e-4, atol=1e-5)


def test_run_each_gives_every_sequence_its_own_frames() -> None:
    """An irregular request: sequences of 5 and 13 frames, outputs at every other frame from 1 (a network without
    recurrences: a recurrence needs a regular request); and one sequence of the recurrent network, as
    `exact_outputs` runs it."""
    a = Node("a", ReLU(Append(Offset(x, -1), x) @ Weight(Normal((2 * D, 5), 0.5))))
    tdnn = Network({"output": Append(a, IfDefined(Offset(a, 2))) @ Weight(Normal((10, 2), 0.5))})
    for net, seqs in ((tdnn, sequences()[:2]), (NET, sequences()[2:])):
        wanted = [np.arange(1, len(s), 2) for s in seqs]
        out = run_each(net, {"input": [(np.arange(len(s)), s) for s in seqs]}, {"output": wanted})["output"]
        for seq, t, got in zip(seqs, wanted, out, strict=True):
            rows = {Index(0, i): seq[i].astype(np.float64) for i in range(len(seq))}
            ref = Reference(net.outputs["output"], {"input": rows}, net.params)
            want = np.stack([ref.value(Index(0, int(f))) for f in t])
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_run_refuses_blocks_and_ends_that_do_not_fit() -> None:
    block = np.zeros((10, 2, D), np.float32)
    with pytest.raises(PlanError, match="input 'input' has shape"):
        run(NET, {"input": Block((0, 9), block)}, {"output": (1, 9)})
    with pytest.raises(PlanError, match="3 ends for 2 sequences"):
        run(NET, {"input": Block((0, 10), block)}, {"output": (1, 9)}, ends=Ends((4, 5, 6)))
