"""The fused scan (engine/frame.py, engine/fused_scan.py) against the plain `lax.scan` JAX differentiates.

Every recurrence below is compiled with each lowering (`compile(..., lowering=...)`,
part of the cache key, so each is its own Computation and jitted program; each
test checks which lowering every recurrence got): the outputs, the Tape's
gradients and `jax.grad` with respect to parameters, input matrices and given
state must agree with the plain scan's, and both must agree with hand-written
references where the test file has one (test_recurrence.py).
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers.nets import rnn
from symnet import (
    Append,
    ComputationRequest,
    Const,
    DimRange,
    Elementwise,
    Failover,
    IfDefined,
    IndexSet,
    Input,
    LogSoftmax,
    Network,
    Node,
    Normal,
    Offset,
    Ref,
    Sigmoid,
    Sum,
    Tanh,
    Weight,
    compile,
    layer_class,
)
from symnet._src.components.recurrent import (
    GruNonlinearityComponent,
    LstmNonlinearityComponent,
    OutputGruNonlinearityComponent,
)
from symnet._src.engine.frame import FrameProgram
from symnet._src.engine.fused_scan import scan_lanes
from symnet._src.engine.recurrence import RecurrentBlock
from symnet._src.engine.scan_merge import MergedScans
from symnet.errors import PlanError

D, C, N, T = 3, 4, 2, 9
x = Input("input", D)


def weight(name: str, *shape: int, scale: float = 0.5) -> Weight:
    return Weight(Normal(shape, scale), name=name)


def prev(name: str, lag: int = -1):
    return IfDefined(Offset(Ref(name), lag))


def lstm(name: str = "m", lag: int = -1, inp=x, dim: int = D):
    """The documentation's LSTM: one input projection, one recurrent matrix, gates by DimRange."""
    gates = inp @ weight(f"{name}.wx", dim, 4 * C) + weight(f"{name}.b", 4 * C, scale=0.1)
    gates = gates + prev(name, lag) @ weight(f"{name}.wh", C, 4 * C)
    i, f = Sigmoid(DimRange(gates, 0, C)), Sigmoid(DimRange(gates, C, C))
    g, o = Tanh(DimRange(gates, 2 * C, C)), Sigmoid(DimRange(gates, 3 * C, C))
    c = Node(f"{name}.c", f * prev(f"{name}.c", lag) + i * g)
    return Node(name, o * Tanh(c))


def lstm_gate_equations():
    """An LSTM written gate by gate, with peepholes on i and f."""
    h, c_prev = prev("h"), prev("c")

    def gate(k: str):
        return x @ weight(f"w{k}", D, C) + h @ weight(f"u{k}", C, C) + weight(f"b{k}", C, scale=0.1)

    i = Sigmoid(gate("i") + c_prev * weight("pi", C))
    f = Sigmoid(gate("f") + c_prev * weight("pf", C))
    c = Node("c", f * c_prev + i * Tanh(gate("g")))
    return Node("h", Sigmoid(gate("o")) * Tanh(c))


def lstmp():
    """An LSTM with a recurrent projection inside the recurrence (the state read back is r = m W_r)."""
    gates = x @ weight("wx", D, 4 * C) + prev("r") @ weight("wr", 2, 4 * C)
    i, f = Sigmoid(DimRange(gates, 0, C)), Sigmoid(DimRange(gates, C, C))
    g, o = Tanh(DimRange(gates, 2 * C, C)), Sigmoid(DimRange(gates, 3 * C, C))
    c = Node("c", f * prev("c") + i * g)
    m = Node("m", o * Tanh(c))
    return Append(m, Node("r", m @ weight("proj", C, 2)))


def gru():
    zr = x @ weight("wzr", D, 2 * C) + prev("h") @ weight("uzr", C, 2 * C)
    z, r = Sigmoid(DimRange(zr, 0, C)), Sigmoid(DimRange(zr, C, C))
    n = Tanh(x @ weight("wn", D, C) + (r * prev("h")) @ weight("un", C, C))
    return Node("h", (1.0 - z) * n + z * prev("h"))


def kaldi_lstm():
    """Kaldi's fast-LSTM cell: LstmNonlinearityComponent over [gates, c_prev]."""
    gates = x @ weight("wx", D, 4 * C) + prev("m") @ weight("wm", C, 4 * C)
    out = LstmNonlinearityComponent("lstm", Append(gates, prev("c")), weight("lstm.params", 3, C))
    return Append(Node("m", DimRange(out, C, C)), Node("c", DimRange(out, 0, C)))


def kaldi_gru():
    zr = Sigmoid(x @ weight("wzr", D, 2 * C) + prev("c") @ weight("uzr", C, 2 * C))
    hpart = x @ weight("wh", D, C)
    out = GruNonlinearityComponent("gru", Append(zr, hpart, prev("c")), weight("gru.w_h", C, C))
    return Append(DimRange(out, 0, C), Node("c", DimRange(out, C, C)))


def kaldi_output_gru():
    z = Sigmoid(x @ weight("wz", D, C) + prev("c") @ weight("uz", C, C))
    out = OutputGruNonlinearityComponent("ogru", Append(z, x @ weight("wh", D, C), prev("c")), weight("ogru.w_h", C))
    return Node("c", DimRange(out, C, C))


def bidirectional():
    both = Append(lstm("fw", -1), lstm("bw", +1))
    return lstm("top", -1, both, 2 * C)


def failover_start():
    h = Failover(Offset(Ref("h"), -1), Const(0.5, C))
    return Node("h", Tanh(x @ weight("w", D, C) + h @ weight("u", C, C)))


def two_lags():
    """Reads itself one and two frames back: two masked edges, a buffer of depth two."""
    both = Sum(prev("h", -1), prev("h", -2) * 0.5)
    return Node("h", Tanh(x @ weight("w", D, C) + both @ weight("u", C, C)))


NETWORKS = {
    "rnn": lambda: rnn(x, D, C),
    "rnn lag 2": lambda: rnn(x, D, C, lag=-2),
    "rnn backward in time": lambda: rnn(x, D, C, lag=+1),
    "lstm": lambda: lstm(),
    "lstm gate equations": lstm_gate_equations,
    "lstmp": lstmp,
    "gru": gru,
    "kaldi lstm": kaldi_lstm,
    "kaldi gru": kaldi_gru,
    "kaldi output gru": kaldi_output_gru,
    "bidirectional": bidirectional,
    "failover start": failover_start,
    "two lags": two_lags,
}


def request(frames=(0, T), given: dict | None = None) -> ComputationRequest:
    inputs = {"input": IndexSet.range(n=N, t=frames)}
    inputs.update({k: IndexSet.range(n=N, t=v) for k, v in (given or {}).items()})
    return ComputationRequest(inputs=inputs, outputs={"output": IndexSet.range(n=N, t=frames)})


def lowerings(c) -> list[str]:
    """The lowering each recurrence of a Computation got, in step order."""
    return [s.lowering for s in c.steps if isinstance(s, RecurrentBlock)]


def outputs_and_grads(net, req, inputs, lowering):
    """Output, Tape gradients, and jax.grad w.r.t. parameters and every input matrix, of one weighted sum."""
    c = compile(net, req, lowering)
    tape = c.forward(net, inputs)["output"]
    delta = jnp.asarray(np.random.default_rng(7).standard_normal(tape.value.shape), jnp.float32)

    def loss(params, inputs):
        return (c.forward(net.replace(params=params), inputs)["output"].value * delta).sum()

    return tape.value, tape.backward(delta), jax.grad(loss, argnums=(0, 1))(net.params, inputs)


def assert_trees_close(a, b, atol=2e-5, what=""):
    for path, (u, v) in zip(jax.tree_util.tree_leaves_with_path(a), zip(jax.tree.leaves(a), jax.tree.leaves(b))):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), atol=atol, rtol=1e-4, err_msg=f"{what} {path[0]}")


def check_against_plain(net, req, inputs, expected=None):
    """Each lowering's outputs and gradients against the plain scan's.

    `expected`: per lowering asked for, the lowering each recurrence gets (default: every one fused, under
    `fused` and `auto`); checked on the Computation, so no lowering is compared with itself.
    """
    num_scans = len(lowerings(compile(net, req, "plain")))
    expected = expected or {"fused": ["fused"] * num_scans, "auto": ["fused"] * num_scans}
    assert lowerings(compile(net, req, "plain")) == ["plain"] * num_scans
    plain = outputs_and_grads(net, req, inputs, "plain")
    results = {}
    for lowering, got_lowerings in expected.items():
        assert lowerings(compile(net, req, lowering)) == got_lowerings, lowering
        got = outputs_and_grads(net, req, inputs, lowering)
        np.testing.assert_allclose(got[0], plain[0], atol=1e-5, err_msg=f"{lowering} outputs")
        assert_trees_close(got[1], plain[1], what=f"{lowering} tape gradients")
        assert_trees_close(got[2], plain[2], what=f"{lowering} jax.grad")
        assert_trees_close(got[1], got[2][0], what=f"{lowering} tape against jax.grad")
        results[lowering] = got
    return results


def inputs_for(frames: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"input": jnp.asarray(rng.standard_normal((frames * N, D)), jnp.float32)}


#: Networks make test-all alone compares (each kind of recurrence has another in make test: a plain RNN, an LSTM, a
#: GRU, Kaldi's output GRU, a bidirectional layer, a Failover start and two lags).
SLOW_NETWORKS = {"rnn lag 2", "rnn backward in time", "lstm gate equations", "lstmp", "kaldi lstm", "kaldi gru"}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_NETWORKS else n for n in NETWORKS]
)
def test_fused_scan_matches_the_plain_scan(name):
    net = Network(NETWORKS[name]())
    check_against_plain(net, request(), inputs_for(T))


@pytest.mark.parametrize("name", ["rnn", "lstm", "two lags", "kaldi lstm"])
def test_inputs_that_start_late_mask_the_first_frames_alike(name):
    # The state starts (zero) where the inputs start; the output frames past the inputs' end are absent.
    net = Network(NETWORKS[name]())
    req = ComputationRequest(
        inputs={"input": IndexSet.range(n=N, t=(2, 2 + T))}, outputs={"output": IndexSet.range(n=N, t=(2, 2 + T))}
    )
    check_against_plain(net, req, inputs_for(T))


def test_a_lookahead_input_is_masked_at_the_end():
    h = Node("h", Tanh(IfDefined(Offset(x, 2)) @ weight("w", D, C) + prev("h") @ weight("u", C, C)))
    check_against_plain(Network(h), request(), inputs_for(T))


@pytest.mark.parametrize("name", ["lstm", pytest.param("kaldi lstm", marks=pytest.mark.slow), "two lags"])
def test_given_state_gets_its_gradient(name):
    """A state carried in from an earlier chunk (a given node value): values and its delta agree."""
    net = Network(NETWORKS[name]())
    states = {"lstm": {"m": 1, "m.c": 1}, "kaldi lstm": {"m": 1, "c": 1}, "two lags": {"h": 2}}[name]
    req = request(given={k: (-depth, 0) for k, depth in states.items()})
    rng = np.random.default_rng(3)
    inputs = inputs_for(T)
    inputs.update({k: jnp.asarray(rng.standard_normal((depth * N, C)), jnp.float32) for k, depth in states.items()})
    fused = check_against_plain(net, req, inputs)["fused"]
    for k in states:
        assert float(jnp.abs(fused[2][1][k]).max()) > 1e-3  # the given state does matter


def chunks_with_carried_state(net, xs, lowering: str, size: int) -> np.ndarray:
    """The LSTM network on `xs` (`[N, T, D]`, T a multiple of `size`) chunk by chunk, as `[N, T, out]`.

    Every chunk is one request in chunk time (so one Computation), the state (m, m.c) at frame -1 given
    from the chunk before (zeros before the first: what IfDefined reads there).
    """
    n, frames, _ = xs.shape
    state = {k: IndexSet.range(n=n, t=(-1, 0)) for k in ("m", "m.c")}
    req = ComputationRequest(
        inputs={"input": IndexSet.range(n=n, t=size), **state},
        outputs={"output": IndexSet.range(n=n, t=size), **{k: IndexSet.range(n=n, t=(size - 1, size)) for k in state}},
    )
    c = compile(net, req, lowering)
    assert lowerings(c) == [lowering]
    carried = {k: jnp.zeros((1, n, C)) for k in state}
    outs = []
    for start in range(0, frames, size):
        result = c(net, {"input": jnp.asarray(xs[:, start : start + size].transpose(1, 0, 2)), **carried})
        outs.append(result["output"])
        carried = {k: result[k] for k in state}
    return np.asarray(jnp.concatenate(outs)).transpose(1, 0, 2)


@pytest.mark.parametrize("lowering", ["fused", "plain"])
def test_chunks_with_carried_state_equal_one_pass(lowering):
    net = Network(LogSoftmax(lstm() @ weight("out", C, 3)))
    xs = np.random.default_rng(1).standard_normal((N, 60, D)).astype(np.float32)
    one_pass = np.asarray(net.compute(xs))  # lowering="auto": the fused scan
    np.testing.assert_allclose(chunks_with_carried_state(net, xs, lowering, 6), one_pass, atol=1e-5)
    np.testing.assert_allclose(net.compute(xs, frames_per_chunk=7), one_pass, atol=1e-5)


def frame_programs(net, req=None) -> list[FrameProgram]:
    c = compile(net, req or request())
    return [s.frames for s in c.steps if isinstance(s, RecurrentBlock)]


def test_the_lstm_gates_are_one_tanh_over_adjacent_columns():
    (program,) = frame_programs(Network(lstm()))
    (group,) = program.groups
    assert [type(program.layers[m]).__name__ for m in group.members] == ["Sigmoid", "Sigmoid", "Tanh", "Sigmoid"]
    assert group.source is not None and group.source[1:] == (0, 4 * C)  # reads the gates' columns directly
    (dot,) = program.deferred
    assert program.layers[dot].children[1].name == "m.wh"


def test_the_gru_groups_its_update_and_reset_gates_and_defers_both_matrices():
    (program,) = frame_programs(Network(gru()))
    (group,) = program.groups
    assert len(group.members) == 2
    assert sorted(program.layers[m].children[1].name for m in program.deferred) == ["un", "uzr"]


def scans(jaxpr) -> list:
    """Every scan in a jaxpr and the jaxprs nested in it, in program order (a nested jaxpr's scans where its
    equation is): (reverse, output shapes of the dot_generals of its body)."""
    found = []
    for eqn in getattr(jaxpr, "jaxpr", jaxpr).eqns:
        if eqn.primitive.name == "scan":
            body = eqn.params["jaxpr"].jaxpr
            dots = [tuple(e.outvars[0].aval.shape) for e in body.eqns if e.primitive.name == "dot_general"]
            found.append((eqn.params["reverse"], dots))
        for sub in eqn.params.values():
            if hasattr(sub, "eqns") or hasattr(sub, "jaxpr"):
                found.extend(scans(sub))
    return found


def test_no_weight_gradient_is_accumulated_inside_the_backward_loop():
    """The recurrent matrix's gradient is one product after the loop, not a [C, N] x [N, 4C] product per frame."""
    net = Network(lstm())
    inputs = inputs_for(T)

    def loops(lowering: str):  # a new function each time: make_jaxpr caches traces by function
        c = compile(net, request(), lowering)

        def grads(params):
            return c.forward(net.replace(params=params), inputs)["output"].backward(1.0)

        return [dots for _, dots in scans(jax.make_jaxpr(grads)(net.params))]  # the forward loop comes first

    forward_dots, backward_dots = loops("auto")
    assert forward_dots == [(N, 4 * C)]  # h @ W_h, all four gates
    assert backward_dots == [(N, C)]  # d @ W_h^T only; W_h's gradient comes after the loop
    assert (4 * C, C) in loops("plain")[1]  # what JAX's transpose of the plain scan does per frame


def zero_fills(computation, net: Network, inputs: dict, shape: tuple[int, ...]) -> int:
    """How many arrays of `shape` filled with a constant the compiled Tape step (forward and backward) makes."""

    def grads(params):
        return computation.forward(net.replace(params=params), inputs)["output"].backward(1.0)

    text = jax.jit(grads).lower(net.params).compile().as_text()
    dims = ",".join(map(str, shape))
    return len(re.findall(rf"= f32\[{dims}\]\{{[0-9,]*\}} (?:broadcast\(%constant|fusion\(%constant)", text))


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the deltas are written in place on CPU only")
def test_the_backward_loop_writes_the_gate_deltas_over_the_saved_gates():
    """No zero-filled [T, N, 4C] buffer: the forward loop writes the gates into the input projection, and the
    backward loop each frame's gate deltas into the saved gates, after reading that frame (through
    `materialized`); the gradients stay those of `jax.grad` (the tests above). JAX's transpose of the plain
    scan fills one."""
    net, inputs = Network(lstm()), inputs_for(T)
    assert zero_fills(compile(net, request()), net, inputs, (T, N, 4 * C)) == 0
    assert zero_fills(compile(net, request(), "plain"), net, inputs, (T, N, 4 * C)) > 0


def test_the_two_directions_of_a_bidirectional_layer_share_one_loop():
    """fw (reading t-1) and bw (reading t+1) do not read each other: one scan forward, one backward pass."""
    net = Network(Append(lstm("fw", -1), lstm("bw", +1)))
    c = compile(net, request())
    (merged,) = [s for s in c.schedule if isinstance(s, MergedScans)]
    assert sorted(b.reverse for b in merged.blocks) == [False, True]
    assert "one loop of 2 recurrences" in c.explain()
    plain = compile(net, request(), "plain")
    assert not [s for s in plain.schedule if isinstance(s, MergedScans)]  # a plain scan is one group's loop
    inputs = inputs_for(T)

    def loops(c) -> list:  # a new function each time: make_jaxpr caches traces by function
        def grads(params):
            return c.forward(net.replace(params=params), inputs)["output"].backward(1.0)

        return scans(jax.make_jaxpr(grads)(net.params))

    merged_loops = loops(c)
    assert len(merged_loops) == 2  # the forward loop and the backward loop, each doing both directions
    assert all(len(dots) == 2 for _, dots in merged_loops)  # one recurrent product per direction per frame
    assert len(loops(plain)) == 4


def test_a_stacked_layer_waits_for_the_layer_below():
    """A recurrence reading another one's output is never merged with it."""
    net = Network(lstm("top", -1, lstm("low", -1), C))
    c = compile(net, request())
    assert not [s for s in c.schedule if isinstance(s, MergedScans)]
    assert len([s for s in c.schedule if isinstance(s, RecurrentBlock)]) == 2


def test_the_bias_added_to_the_input_projection_is_added_inside_the_loop():
    """The scan reads x @ wx per frame; `+ b` is computed per frame, not as one more pass over all frames."""
    c = compile(Network(lstm()), request())
    (block,) = [s for s in c.steps if isinstance(s, RecurrentBlock)]
    (external,) = block.externals
    assert type(c.graph.layers[external.op]).__name__ == "Dot"
    assert c.graph.layers[external.op].children[1].name == "m.wx"


@layer_class
class Softsign(Elementwise):
    """`a / (1 + |a|)`: a user's layer with `apply` and no `vjp` (docs/extending.md: JAX differentiates it)."""

    def apply(self, a):
        return a / (1.0 + jnp.abs(a))


def softsign_rnn(name: str = "s", lag: int = -1):
    return Node(name, Softsign(x @ weight(f"{name}.w", D, C) + prev(name, lag) @ weight(f"{name}.u", C, C)))


def test_a_member_without_a_vjp_makes_its_recurrence_plain_under_auto():
    """In one Network: the LSTM fused, the Softsign recurrence plain; both equal the plain scan, gradients too."""
    net = Network(Append(lstm(), softsign_rnn()))
    check_against_plain(net, request(), inputs_for(T), {"auto": ["fused", "plain"]})
    explained = compile(net, request()).explain()
    assert "recurrence of m" in explained and ": fused scan" in explained
    assert ": plain scan: no vjp in Softsign(" in explained


def test_merged_recurrences_with_a_member_without_a_vjp():
    """Two directions that would share one fused loop: the Softsign one runs plain, the other fused, alone."""
    net = Network(Append(lstm("fw", -1), softsign_rnn("bw", +1)))
    c = compile(net, request())
    assert not [s for s in c.schedule if isinstance(s, MergedScans)]
    check_against_plain(net, request(), inputs_for(T), {"auto": ["fused", "plain"]})
    both = Network(Append(softsign_rnn("fw", -1), softsign_rnn("bw", +1)))
    check_against_plain(both, request(), inputs_for(T), {"auto": ["plain", "plain"]})


def test_fused_lowering_of_a_member_without_a_vjp_is_a_plan_error_naming_it():
    net = Network(softsign_rnn())
    with pytest.raises(PlanError, match=r"lowering='fused'.*Softsign\(.*built at .*test_fused_scan.py:\d+.*no vjp"):
        compile(net, request(), "fused")


def test_an_unknown_lowering_is_a_plan_error():
    with pytest.raises(PlanError, match="lowering='fast'.*'auto', 'fused', 'plain'"):
        compile(Network(lstm()), request(), "fast")


def overwritten(jaxpr) -> int:
    """How many of a jaxpr's inputs its loop takes as buffers to update in place (carries), not as operands."""
    (loop,) = [eqn for eqn in jaxpr.jaxpr.eqns if eqn.primitive.name == "scan"]
    start = loop.params["num_consts"]
    carried = {id(v) for v in loop.invars[start : start + loop.params["num_carry"]]}
    return sum(id(v) in carried for v in jaxpr.jaxpr.invars)


@pytest.mark.parametrize("backward", [[False], [True], [False, True]])
def test_an_output_is_written_into_an_operand_nothing_reads_after_the_loop(backward):
    """`scan_lanes` writes each lane's per-frame `tanh(x)` into its `x` (no fresh buffer), equal to lax.scan's."""
    xs = [jnp.asarray(np.random.default_rng(k).standard_normal((T, N, C)), jnp.float32) for k in range(len(backward))]

    def step(carries, frames):
        ys = [jnp.tanh(f[0] + c) for c, f in zip(carries, frames)]
        return tuple(c + 0.5 * y for c, y in zip(carries, ys)), tuple((y,) for y in ys)

    def run(*xs, into=True):
        carry0 = tuple(jnp.zeros((N, C)) for _ in xs)
        lanes = tuple((x,) for x in xs)
        return scan_lanes(step, carry0, lanes, backward, 1, [{0: 0} for _ in xs] if into else None)

    def reference(x, reverse):
        return jax.lax.scan(
            lambda c, f: (c + 0.5 * jnp.tanh(f + c), jnp.tanh(f + c)), jnp.zeros((N, C)), x, reverse=reverse
        )

    carries, ys = run(*xs)
    for k, (x, reverse) in enumerate(zip(xs, backward)):
        want_carry, want_ys = reference(x, reverse)
        np.testing.assert_allclose(carries[k], want_carry, atol=1e-6)
        np.testing.assert_allclose(ys[k][0], want_ys, atol=1e-6)
    assert overwritten(jax.make_jaxpr(run)(*xs)) == len(xs)
    assert overwritten(jax.make_jaxpr(lambda *xs: run(*xs, into=False))(*xs)) == 0


def test_an_operand_read_by_another_output_is_not_overwritten():
    """The carry reads x besides through y: y gets a buffer of its own (XLA would copy x every frame)."""
    x = jnp.asarray(np.random.default_rng(0).standard_normal((T, N, C)), jnp.float32)

    def step(carries, frames):
        ((x_t,),) = frames
        y = jnp.tanh(x_t + carries[0])
        return (carries[0] * x_t + y,), ((y,),)

    def run(x):
        return scan_lanes(step, (jnp.zeros((N, C)),), ((x,),), [False], 1, [{0: 0}])

    assert overwritten(jax.make_jaxpr(run)(x)) == 0
    want = jax.lax.scan(lambda c, f: (c * f + jnp.tanh(f + c), jnp.tanh(f + c)), jnp.zeros((N, C)), x)
    np.testing.assert_allclose(run(x)[1][0][0], want[1], atol=1e-6)


def forward_loop_writes(net) -> list[tuple[int, ...]]:
    """The shapes of the buffers the fused forward loop writes a frame of, when it saves for the backward."""
    c = compile(net, request())
    inputs = inputs_for(T)

    def grads(params):
        return c.forward(net.replace(params=params), inputs)["output"].backward(1.0)

    def first_scan(jaxpr):  # in program order, into nested jaxprs: the forward loop
        for eqn in getattr(jaxpr, "jaxpr", jaxpr).eqns:
            if eqn.primitive.name == "scan":
                return eqn
            for sub in eqn.params.values():
                if hasattr(sub, "eqns") or hasattr(sub, "jaxpr"):
                    found = first_scan(sub)
                    if found is not None:
                        return found
        return None

    body = first_scan(jax.make_jaxpr(grads)(net.params)).params["jaxpr"].jaxpr
    writes = [e for e in body.eqns if e.params.get("name") == "dynamic_update_index_in_dim"]
    return [tuple(e.outvars[0].aval.shape) for e in writes]


def test_the_lstm_forward_saves_the_gates_in_the_input_projection_and_recomputes_tanh_c():
    """Saved per frame: the gates' tanh (into x @ wx's buffer, read there first), c and h; tanh(c) is
    recomputed from c in the backward loop. Values and gradients: test_fused_scan_matches_the_plain_scan."""
    assert sorted(forward_loop_writes(Network(lstm()))) == [(T, N, C), (T, N, C), (T, N, 4 * C)]


def carried_shapes(jaxpr) -> list[tuple[int, ...]]:
    """The shapes of every scan's carries, in a jaxpr and the jaxprs nested in it."""
    found, stack = [], [jaxpr]
    while stack:
        item = stack.pop()
        j = getattr(item, "jaxpr", item)
        for eqn in j.eqns:
            if eqn.primitive.name == "scan":
                start = eqn.params["num_consts"]
                found += [tuple(v.aval.shape) for v in eqn.invars[start : start + eqn.params["num_carry"]]]
            stack.extend(v for v in eqn.params.values() if hasattr(v, "eqns") or hasattr(v, "jaxpr"))
    return found


def test_jax_differentiates_the_forward_loop_as_the_loop_without_writes_in_place():
    """JAX's own reverse mode of the fused forward loop (`gradient="jax"`) runs the loop that writes fresh
    buffers: the derivative of a buffer updated in place would copy it every frame. Run as it is, the loop
    carries the gates' buffer."""
    net, inputs, gates = Network(lstm()), inputs_for(T), (T, N, 4 * C)
    c = compile(net, request(), gradient="jax")
    assert gates in carried_shapes(jax.make_jaxpr(lambda p: c(net.replace(params=p), inputs)["output"])(net.params))
    grad = jax.make_jaxpr(jax.grad(lambda p: c(net.replace(params=p), inputs)["output"].sum()))(net.params)
    assert gates not in carried_shapes(grad)
