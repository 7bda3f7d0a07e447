"""Unit tests of every descriptor, with hand-computed rows.

Input rows encode their own Index: the row of input `(n, t, x)` is
`[t, 10 n + 100 x]`, so an output row says which input row it read. Every test
checks the engine against the hand-computed matrix and also checks the
reference evaluator (`tests/helpers/reference.py`) against it.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symnet
from helpers.reference import Reference, reference_outputs, rows_to_dict
from symnet import LogSoftmax, Normal, PlanError, ReLU, Weight
from symnet._src.core.descriptor import (
    Append,
    Const,
    DimRange,
    Failover,
    IfDefined,
    Input,
    Node,
    Offset,
    Ref,
    ReplaceIndex,
    Round,
    Scale,
    Sum,
    Switch,
)
from symnet._src.core.index import Index, IndexSet
from symnet.engine import ComputationRequest, compile

x = Input("input", 2)

# Bugs found by these tests (see the reasons); the owner removes a mark once fixed.


def row(n: int, t: int, xx: int = 0) -> list[float]:
    return [float(t), float(10 * n + 100 * xx)]


def rows_of(indexes) -> np.ndarray:
    return np.array([row(*Index(*i)) for i in indexes], dtype=np.float64).reshape(-1, 2)


def run(net, outputs, inputs=None, values=None) -> dict[str, np.ndarray]:
    """Compile and run; `inputs` defaults to 'input' on 2 sequences x frames 0..4."""
    if not isinstance(net, symnet.Network):
        net = symnet.Network(net)
    if inputs is None:
        inputs = {"input": IndexSet.range(n=2, t=(0, 5))}
    inputs = {k: (v if isinstance(v, IndexSet) else IndexSet.of(v)) for k, v in inputs.items()}
    if not isinstance(outputs, dict):
        outputs = {"output": outputs}
    if values is None:
        values = {name: rows_of(s) for name, s in inputs.items()}
    req = ComputationRequest(inputs=inputs, outputs=outputs)
    comp = compile(net, req)
    got = {k: np.asarray(v) for k, v in comp(net, values).items()}
    # The reference must agree with the engine (and, in each test, with the hand-computed rows).
    ref_inputs = {name: rows_to_dict(s, values[name]) for name, s in inputs.items()}
    want = reference_outputs(net.outputs, ref_inputs, net.params, {k: req.outputs[k] for k in outputs})
    for k in outputs:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-6, err_msg=f"engine vs reference, {k}")
    return got


def check(net, outputs, expected, **kw) -> None:
    got = run(net, outputs, **kw)
    if not isinstance(expected, dict):
        expected = {"output": expected}
    for k, e in expected.items():
        np.testing.assert_allclose(got[k], np.asarray(e, dtype=np.float64), rtol=1e-6, atol=1e-6, err_msg=k)


def frames(n, t0, t1):
    return IndexSet.range(n=n, t=(t0, t1))


# ----- Offset --------------------------------------------------------------------------


def test_offset_back_and_forward():
    # Rows t-major: (0,1) (1,1) (0,2) (1,2) ...
    check(Offset(x, -1), frames(2, 1, 5), [[0, 0], [0, 10], [1, 0], [1, 10], [2, 0], [2, 10], [3, 0], [3, 10]])
    check(Offset(x, 2), frames(2, 0, 3), [[2, 0], [2, 10], [3, 0], [3, 10], [4, 0], [4, 10]])


def test_offset_zero_is_identity():
    check(Offset(x, 0), frames(2, 0, 5), rows_of(frames(2, 0, 5)))


def test_offset_in_x():
    ins = [(n, t, xx) for t in range(3) for n in range(2) for xx in range(2)]
    # (n, t, x) reads (n, t + 1, x + 1)
    check(
        Offset(x, 1, 1),
        [(0, 0, 0), (1, 1, 0), (0, 1, -1)],
        [row(0, 1, 1), row(1, 2, 1), row(0, 2, 0)],
        inputs={"input": ins},
    )


def test_offset_edges_are_uncomputable():
    with pytest.raises(PlanError):
        run(Offset(x, -1), frames(2, 0, 5))  # t = 0 reads t = -1
    with pytest.raises(PlanError):
        run(Offset(x, 1), frames(2, 0, 5))  # t = 4 reads t = 5


def test_offset_far_outside_the_data():
    # Frames before the first and after the last: only a shift of the right size reaches them.
    check(Offset(x, 7), frames(2, -7, -5), [[0, 0], [0, 10], [1, 0], [1, 10]])
    check(Offset(x, -8), frames(1, 11, 13), [[3, 0], [4, 0]])


# ----- Append, Sum -----------------------------------------------------------------------


def test_append_of_offsets():
    got = run(Append(Offset(x, -1), x, Offset(x, 1)), frames(2, 1, 3))
    want = [
        [0, 0, 1, 0, 2, 0],
        [0, 10, 1, 10, 2, 10],
        [1, 0, 2, 0, 3, 0],
        [1, 10, 2, 10, 3, 10],
    ]
    np.testing.assert_allclose(got["output"], want)


def test_append_computable_only_where_every_part_is():
    with pytest.raises(PlanError):
        run(Append(x, Offset(x, 1)), frames(2, 3, 5))


def test_sum():
    # x[t] + x[t+1] = [2t + 1, 20 n]
    check(Sum(x, Offset(x, 1)), frames(2, 0, 2), [[1, 0], [1, 20], [3, 0], [3, 20]])
    check(Sum(x, x, Offset(x, -2)), frames(1, 2, 4), [[2 + 2 + 0, 0], [3 + 3 + 1, 0]])


# ----- IfDefined, Failover -----------------------------------------------------------------


def test_ifdefined_gives_zeros_where_undefined():
    check(IfDefined(Offset(x, -1)), frames(2, 0, 2), [[0, 0], [0, 0], [0, 0], [0, 10]])
    check(
        Append(x, IfDefined(Offset(x, 2))),
        frames(1, 2, 5),
        [[2, 0, 4, 0], [3, 0, 0, 0], [4, 0, 0, 0]],
    )


def test_ifdefined_always_computable_even_without_any_input():
    # Entirely outside the data: all zeros.
    check(IfDefined(x), frames(2, 7, 9), np.zeros((4, 2)))


def test_failover_picks_second_at_the_edges():
    # Failover(x[t+1], x[t]): the next frame where it exists, else this frame.
    check(Failover(Offset(x, 1), x), frames(1, 0, 5), [[1, 0], [2, 0], [3, 0], [4, 0], [4, 0]])
    check(
        Failover(Offset(x, -1), Const(-1.0, 2)),
        frames(2, 0, 2),
        [[-1, -1], [-1, -1], [0, 0], [0, 10]],
    )


def test_failover_whose_second_part_is_never_needed():
    check(Failover(x, Const(-1.0, 2)), frames(2, 0, 2), rows_of(frames(2, 0, 2)))


def test_switch_part_never_selected():
    # Only even frames are requested: the part for odd frames is never read.
    check(Switch(x, Offset(x, 1)), IndexSet.range(n=2, t=range(0, 4, 2)), [[0, 0], [0, 10], [2, 0], [2, 10]])


def test_failover_uncomputable_where_neither_is():
    with pytest.raises(PlanError):
        run(Failover(Offset(x, 5), Offset(x, 6)), frames(1, 0, 1))


def test_nested_failover_and_ifdefined():
    d = Failover(Offset(x, 2), Failover(Offset(x, 1), IfDefined(Offset(x, 9))))
    check(d, frames(1, 2, 5), [[4, 0], [4, 0], [0, 0]])


# ----- Switch, Round -----------------------------------------------------------------------


def test_switch_three_parts_floor_modulus():
    # Part t mod 3: 0 -> x, 1 -> 2 x, 2 -> x[t-1]; for t = -1, -1 mod 3 = 2.
    sw = Switch(x, Scale(2.0, x), Offset(x, -1))
    ins = {"input": frames(1, -4, 6)}
    outs = frames(1, -3, 6)
    expected = []
    for t in range(-3, 6):
        k = t % 3
        expected.append([t, 0] if k == 0 else [2 * t, 0] if k == 1 else [t - 1, 0])
    assert expected[2] == [-2, 0]  # t = -1 picks the last part
    check(sw, outs, expected, inputs=ins)


def test_switch_computability_follows_the_chosen_part():
    # Part 1 (odd t) reads t + 1; t = 4 (even) is fine, t = 3 is fine, t = 5 would read 6.
    sw = Switch(x, Offset(x, 1))
    check(sw, [(0, 4), (0, 3), (1, 0)], [[4, 0], [4, 0], [0, 10]])
    with pytest.raises(PlanError):
        run(sw, [(0, 5)], inputs={"input": frames(1, 0, 6)})


def test_switch_single_part_is_the_part():
    check(Switch(Offset(x, 1)), frames(1, 0, 2), [[1, 0], [2, 0]])


def test_round_negative_t():
    # Round(x, 3): t -> floor(t / 3) * 3; -1 -> -3, -3 -> -3, -4 -> -6, 2 -> 0, 5 -> 3.
    ins = {"input": frames(2, -6, 6)}
    outs = [(0, -1), (1, -3), (0, -4), (1, 2), (0, 5), (0, 0), (1, -6)]
    check(Round(x, 3), outs, [[-3, 0], [-3, 10], [-6, 0], [0, 10], [3, 0], [0, 0], [-6, 10]], inputs=ins)


def test_round_needs_only_the_rounded_frames():
    # Inputs only at multiples of 4: Round reaches every frame.
    ins = [(0, t) for t in (-4, 0, 4)]
    check(Round(x, 4), [(0, t) for t in range(-4, 8)], [[4 * (t // 4), 0] for t in range(-4, 8)], inputs={"input": ins})


def test_round_modulus_one_is_identity():
    check(Round(x, 1), frames(2, 0, 5), rows_of(frames(2, 0, 5)))


# ----- ReplaceIndex -------------------------------------------------------------------------


def test_replace_index_t():
    check(ReplaceIndex(x, "t", 0), frames(2, -2, 7), [[0, 10 * n] for t in range(-2, 7) for n in range(2)])


def test_replace_index_ivector_pattern():
    iv = Input("ivector", 2)
    net = Append(x, ReplaceIndex(iv, "t", 0))
    ins = {"input": frames(2, 0, 3), "ivector": [(0, 0), (1, 0)]}
    vals = {"input": rows_of(frames(2, 0, 3)), "ivector": np.array([[7.0, 8.0], [9.0, 6.0]])}
    want = [[t, 10 * n] + ([7, 8] if n == 0 else [9, 6]) for t in range(3) for n in range(2)]
    check(net, frames(2, 0, 3), want, inputs=ins, values=vals)


def test_replace_index_x():
    # Outputs at x = 1, 2 read the input at x = 0.
    outs = [(0, 1, 1), (1, 2, 2), (0, 0, 5)]
    check(ReplaceIndex(x, "x", 0), outs, [row(0, 1), row(1, 2), row(0, 0)])


def test_replace_index_x_then_offset_in_x():
    ins = [(n, t, xx) for t in range(2) for n in range(2) for xx in range(3)]
    d = Sum(ReplaceIndex(x, "x", 2), Offset(x, 0, 1))
    # at (n, t, 0): x(n, t, 2) + x(n, t, 1) = [2t, 20n + 300]
    check(d, [(0, 0, 0), (1, 1, 0), (1, 1, 1)], [[0, 300], [2, 320], [2, 420]], inputs={"input": ins})


# ----- Const, Scale, DimRange -----------------------------------------------------------------


def test_const():
    check(Append(x, Const(0.5, 3)), frames(1, 0, 2), [[0, 0, 0.5, 0.5, 0.5], [1, 0, 0.5, 0.5, 0.5]])
    check(Sum(Offset(x, 1), Const(-2.0, 2)), frames(2, 3, 4), [[2, -2], [2, 8]])


def test_const_alone_is_computable_everywhere():
    check(Const(3.0, 2), frames(2, 50, 51), [[3, 3], [3, 3]], inputs={})


def test_scale():
    check(Scale(0.5, Offset(x, 1)), frames(2, 0, 2), [[0.5, 0], [0.5, 5], [1, 0], [1, 5]])
    check(Scale(-2.0, Append(x, Const(1.0, 1))), frames(1, 3, 4), [[-6, 0, -2]])


def test_dim_range():
    d = DimRange(Append(x, Offset(x, 1)), 1, 2)  # columns [10n, t+1]
    check(d, frames(2, 0, 2), [[0, 1], [10, 1], [0, 2], [10, 2]])


# ----- irregular requests -------------------------------------------------------------------


def test_gaps_in_the_output_frames():
    outs = [(0, 1), (0, 3), (1, 7), (0, 8)]
    check(
        Append(Offset(x, -1), x),
        outs,
        [[0, 0, 1, 0], [2, 0, 3, 0], [6, 10, 7, 10], [7, 0, 8, 0]],
        inputs={"input": frames(2, 0, 10)},
    )


def test_every_third_frame():
    outs = IndexSet.range(n=2, t=range(0, 12, 3))
    want = [[t + 1, 10 * n] for t in range(0, 12, 3) for n in range(2)]
    check(Offset(x, 1), outs, want, inputs={"input": frames(2, 0, 13)})
    # Every third frame of the input, Round to it.
    ins = IndexSet.range(n=1, t=range(0, 12, 3))
    check(Round(x, 3), frames(1, 0, 12), [[3 * (t // 3), 0] for t in range(12)], inputs={"input": ins})


def test_sequences_of_different_lengths():
    lengths = {0: 8, 1: 3, 2: 5}
    ins = [(n, t) for n, T in lengths.items() for t in range(T)]
    outs = [(n, t) for n, T in lengths.items() for t in range(1, T - 1)]
    want = [[t - 1, 10 * n, t + 1, 10 * n] for n, t in outs]
    check(Append(Offset(x, -1), Offset(x, 1)), outs, want, inputs={"input": ins})
    # Beyond the short sequence's end: uncomputable.
    with pytest.raises(PlanError):
        run(Offset(x, 1), [(1, 2)], inputs={"input": ins})


def test_output_rows_in_request_order():
    outs = [(1, 3), (0, 0), (1, 0), (0, 4), (0, 2)]
    check(x * 1.0, outs, rows_of(outs))
    check(Offset(x, -1), [(1, 3), (0, 1), (1, 2)], [[2, 10], [0, 0], [1, 10]])


def test_input_rows_in_any_order():
    ins = [(1, 2), (0, 0), (1, 0), (0, 2), (0, 1), (1, 1)]
    check(
        Append(x, Offset(x, 1)),
        frames(2, 0, 2),
        [[0, 0, 1, 0], [0, 10, 1, 10], [1, 0, 2, 0], [1, 10, 2, 10]],
        inputs={"input": ins},
    )


def test_sequences_not_starting_at_zero():
    check(
        Offset(x, 1),
        IndexSet.range(n=(3, 5), t=(0, 2)),
        [[1, 30], [1, 40], [2, 30], [2, 40]],
        inputs={"input": IndexSet.range(n=(3, 5), t=(0, 3))},
    )


# ----- Nodes, Refs, several outputs ------------------------------------------------------------


def test_ref_to_a_named_node():
    h = Node("h", Scale(2.0, x))
    net = symnet.Network(Append(Offset(Ref("h"), -1), h))
    check(net, frames(1, 1, 3), [[0, 0, 2, 0], [2, 0, 4, 0]])


def test_two_outputs():
    net = symnet.Network({"a": Offset(x, -1), "b": Sum(x, Const(1.0, 2))})
    check(net, {"a": frames(1, 1, 3), "b": [(1, 0)]}, {"a": [[0, 0], [1, 0]], "b": [[1, 11]]})


def test_the_input_itself_as_outputs():
    net = symnet.Network({"a": x, "b": Offset(x, 1), "c": Offset(x, 1)})
    check(
        net,
        {"a": [(1, 2), (0, 0)], "b": frames(2, 1, 3), "c": [(1, 0)]},
        {"a": [[2, 10], [0, 0]], "b": [[2, 0], [2, 10], [3, 0], [3, 10]], "c": [[1, 10]]},
    )


def test_regular_outputs_at_another_x():
    check(ReplaceIndex(x, "x", 0), IndexSet.range(n=2, t=(1, 3), x=1), [[1, 0], [1, 10], [2, 0], [2, 10]])


# ----- the computability error ------------------------------------------------------------------


def test_uncomputable_request_names_output_and_missing_inputs():
    net = symnet.Network({"scores": Append(x, Offset(x, 1))})
    ins = {"input": [(n, t) for n in range(2) for t in range(6)]}
    with pytest.raises(PlanError) as err:
        run(net, {"scores": [(0, 2), (1, 5)]}, inputs=ins)
    msg = str(err.value)
    assert "'scores'" in msg
    assert "(1, 5)" in msg  # the requested Index that cannot be computed
    assert "'input'" in msg and "(1, 6)" in msg  # the missing input Index
    assert "(0, 2)" not in msg.split("\n")[0].split(":", 1)[1]  # the computable one is not blamed


def test_uncomputable_regular_request_names_the_frames():
    with pytest.raises(PlanError) as err:
        run(Offset(x, -2), frames(2, 0, 5))
    msg = str(err.value)
    assert "'output'" in msg
    assert re.search(r"\(0, 0:1\)|\(0, 0\)", msg)
    assert re.search(r"\(0, -2:-1\)|\(0, -2\)", msg)


# ----- a recurrence -------------------------------------------------------------------------------


def test_recurrence_through_ifdefined():
    # h[t] = 0.5 h[t-1] + x[t], starting from zeros at the first frame.
    h = Node("h", Sum(x, Scale(0.5, IfDefined(Offset(Ref("h"), -1)))))
    want = []
    state = np.zeros((2, 2))
    for t in range(5):
        state = 0.5 * state + np.array([[t, 0.0], [t, 10.0]])
        want.extend(state.copy())
    check(h, frames(2, 0, 5), want)
    # Only the last frames: the recurrence still starts at t = 0.
    check(h, frames(2, 3, 5), want[6:])


def test_recurrence_through_failover_and_offset_two():
    # h[t] = x[t] + h[t-2] where defined, else x[t] + 100.
    h = Node("h", Sum(x, Failover(Offset(Ref("h"), -2), Const(100.0, 2))))
    want = {}
    for t in range(6):
        prev = want.get(t - 2, np.array([100.0, 100.0]))
        want[t] = np.array([t, 0.0]) + prev
    check(h, frames(1, 0, 6), [want[t] for t in range(6)], inputs={"input": frames(1, 0, 6)})


def test_recurrence_of_one_column():
    x1 = Input("input", 1)
    h = Node("h", Sum(x1, Scale(0.5, IfDefined(Offset(Ref("h"), -1)))))
    ins = {"input": frames(1, 0, 3)}
    check(h, frames(1, 0, 3), [[0.0], [1.0], [2.5]], inputs=ins, values={"input": np.array([[0.0], [1.0], [2.0]])})


def test_reference_recurrence_by_hand():
    h = Node("h", Sum(x, Scale(0.5, IfDefined(Offset(Ref("h"), -1)))))
    inputs = {"input": rows_to_dict(frames(1, 0, 5), rows_of(frames(1, 0, 5)))}
    ref = Reference(h, inputs, {})
    np.testing.assert_allclose(ref.value((0, 2)), [2 + 0.5 * (1 + 0.5 * 0), 0])
    assert ref.value((0, 5)) is None


# ----- lowering: a regular TDNN has no gather or scatter ---------------------------------------------


def test_w1_lowers_without_gather_or_scatter():
    xin = Input("input", 12)
    h = Append(Offset(xin, -1), xin, Offset(xin, 1), Offset(xin, 2))
    h = ReLU(h @ Weight(Normal((48, 65), 0.1)) + Weight(Normal((65,), 0.1)))
    out = LogSoftmax(h @ Weight(Normal((65, 115), 0.1)) + Weight(Normal((115,), 0.1)))
    net = symnet.Network(out)
    req = ComputationRequest(
        inputs={"input": IndexSet.range(n=256, t=(0, 20))},
        outputs={"output": IndexSet.range(n=256, t=(1, 18))},
    )
    comp = compile(net, req)
    inputs = {"input": jnp.ones((256 * 20, 12))}
    delta = jnp.ones((256 * 17, 115)) / (256 * 17)

    def value(p, i):
        return comp(net.replace(params=p), i)["output"]

    def tape_grad(p, i):
        return comp.forward(net.replace(params=p), i)["output"].backward(delta)

    def loss(p, i):
        return jnp.sum(value(p, i) * delta)

    texts = {
        "forward": jax.jit(value).lower(net.params, inputs).as_text(),
        "tape backward": jax.jit(tape_grad).lower(net.params, inputs).as_text(),
        "jax.grad": jax.jit(jax.grad(loss)).lower(net.params, inputs).as_text(),
    }
    for what, text in texts.items():
        assert "gather" not in text, what
        assert "scatter" not in text, what
    assert np.asarray(value(net.params, inputs)).shape == (256 * 17, 115)


def test_w2_tdnn_lowers_without_gather_or_scatter():
    """W2's layout (six splices, Kaldi's normalise, context 10/10) at small widths: slices only."""
    from symnet.components import NormalizeComponent

    h, dim = Input("input", 40), 40
    for i, offsets in enumerate([(-2, -1, 0, 1, 2), (-1, 0, 1), (-1, 0, 1), (-3, 0, 3), (-3, 0, 3), (0,)]):
        spliced = Append(*[Offset(h, o) if o else h for o in offsets]) if len(offsets) > 1 else h
        relu = ReLU(spliced @ Weight(Normal((dim * len(offsets), 16), 0.1)) + Weight(Normal((16,), 0.1)))
        h, dim = NormalizeComponent(f"norm{i}", relu, 16, 16), 16
    net = symnet.Network(LogSoftmax(h @ Weight(Normal((16, 20), 0.1))))
    assert net.context() == (10, 10)
    req = ComputationRequest(
        inputs={"input": IndexSet.range(n=4, t=(-10, 40))}, outputs={"output": IndexSet.range(n=4, t=30)}
    )
    comp = compile(net, req)
    inputs = {"input": jnp.ones((4 * 50, 40))}
    delta = jnp.ones((4 * 30, 20))

    def tape_grad(p, i):
        return comp.forward(net.replace(params=p), i)["output"].backward(delta)

    for text in (
        jax.jit(lambda p, i: comp(net.replace(params=p), i)["output"]).lower(net.params, inputs).as_text(),
        jax.jit(tape_grad).lower(net.params, inputs).as_text(),
    ):
        assert "gather" not in text and "scatter" not in text
