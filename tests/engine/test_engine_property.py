"""Property tests: the Index engine against the reference evaluator (`tests/helpers/reference.py`).

Random small networks mixing descriptors and row-wise layers with Weights, on
random regular requests (`IndexSet.range`) and irregular ones (explicit Index
lists, in random order). For each, the reference decides which output Indexes
are computable; the engine must give the same rows for a random subset of
them (in float64), `tape.backward` must equal `jax.grad` of the engine's
output and `jax.grad` of the reference (run on `jax.numpy`), and asking for
an Index the reference says is uncomputable must raise PlanError.
"""

from __future__ import annotations

import itertools
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import symnet
from helpers.netgen import NetGen, draw_network, reads_input
from helpers.reference import Reference, reference_outputs, rows_to_dict
from symnet import (
    PlanError,
    ReLU,
    Tanh,
    Weight,
)
from symnet._src.core.descriptor import (
    Append,
    Const,
    Failover,
    IfDefined,
    Input,
    Node,
    Offset,
    Ref,
    ReplaceIndex,
    Round,
    Sum,
    Switch,
)
from symnet._src.core.index import Index, IndexSet
from symnet.engine import ComputationRequest, compile

RTOL, ATOL = 1e-8, 1e-10


# ----- helpers ----------------------------------------------------------------------------------


def input_matrix(rng: np.random.Generator, rows: int, dim: int) -> np.ndarray:
    return rng.normal(size=(rows, dim))


def engine_run(net, req, values):
    comp = compile(net, req)
    out = {k: np.asarray(v) for k, v in comp(net, values).items()}
    return comp, out


def check_against_reference(net, req, values, rng):
    """The engine's values and gradients against the reference's, for every output of `req`."""
    comp, got = engine_run(net, req, values)
    ref_inputs = {name: rows_to_dict(s, values[name]) for name, s in req.inputs.items()}
    wanted = {k: list(v) for k, v in req.outputs.items()}
    want = reference_outputs(net.outputs, ref_inputs, net.params, wanted)
    for k in wanted:
        assert got[k].dtype == np.float64
        np.testing.assert_allclose(got[k], want[k], rtol=RTOL, atol=ATOL, err_msg=f"values of {k}")

    deltas = {k: rng.normal(size=got[k].shape) for k in wanted}
    tapes = comp.forward(net, values)
    for k in wanted:
        np.testing.assert_allclose(
            np.asarray(tapes[k].value), got[k], rtol=RTOL, atol=ATOL, err_msg=f"tape value of {k}"
        )
        assert row_labels(tapes[k].rows) == wanted[k], f"row labels of the tape of {k}"

    autodiff = compile(net, req, gradient="jax")  # JAX's own reverse mode of the lowered program

    def engine_loss(params, comp=autodiff):
        outs = comp(net.replace(params=params), values)
        return sum(jnp.sum(outs[k] * deltas[k]) for k in wanted)

    def reference_loss(params):
        outs = reference_outputs(net.outputs, ref_inputs, params, wanted, xp=jnp)
        return sum(jnp.sum(outs[k] * deltas[k]) for k in wanted)

    # tape.backward, output by output (summed), against jax.grad of the engine and of the reference.
    tape_grads = {name: np.zeros(np.shape(v)) for name, v in net.params.items()}
    for k in wanted:
        for name, g in tapes[k].backward(deltas[k]).items():
            tape_grads[name] = tape_grads[name] + np.asarray(g)
    if not net.params:
        return
    engine_grads = jax.grad(engine_loss)(net.params)
    reference_grads = jax.grad(reference_loss)(dict(net.params))
    # jax.grad of a default call runs the Tape's walk (symnet._src.engine.gradient): all of a multi-output run's
    # seeds at once, so it also checks the summed walk against the per-output walks above.
    by_walk = jax.grad(lambda p: engine_loss(p, comp))(net.params)
    for name in net.params:
        np.testing.assert_allclose(
            np.asarray(by_walk[name]),
            np.asarray(engine_grads[name]),
            rtol=1e-7,
            atol=1e-9,
            err_msg=f"jax.grad(engine, gradient='tape') vs jax.grad(engine, gradient='jax'), {name}",
        )
        np.testing.assert_allclose(
            tape_grads[name],
            np.asarray(engine_grads[name]),
            rtol=1e-7,
            atol=1e-9,
            err_msg=f"tape.backward vs jax.grad(engine), {name}",
        )
        np.testing.assert_allclose(
            tape_grads[name],
            np.asarray(reference_grads[name]),
            rtol=1e-7,
            atol=1e-9,
            err_msg=f"tape.backward vs jax.grad(reference), {name}",
        )


def row_labels(rows) -> list[Index]:
    """The Indexes of a tape's rows, in row order (an IndexSet, or an object with `index_set()`)."""
    if hasattr(rows, "index_set"):
        rows = rows.index_set()
    return list(rows)


def check_uncomputable(net, inputs, bad, name: str):
    req = ComputationRequest(inputs=inputs, outputs={name: bad})
    with pytest.raises(PlanError) as err:
        compile(net, req)
    assert repr(name) in str(err.value)


SETTINGS = settings(
    max_examples=int(os.environ.get("SYMNET_PROPERTY_EXAMPLES", "5")),
    deadline=None,
    database=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


# ----- the properties ---------------------------------------------------------------------------


@SETTINGS
@given(st.data())
def test_regular_requests_match_reference(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    num_seq = data.draw(st.integers(1, 3), label="N")
    t0 = data.draw(st.integers(-3, 3), label="t0")
    frames = data.draw(st.integers(1, 7), label="T")
    dim = data.draw(st.integers(1, 3), label="dim")
    with jax.enable_x64(True):
        gen = NetGen(data, rng, dim, x_moves=False, recurrent=True, t_range=(t0, t0 + frames))
        net = draw_network(gen)
        in_set = IndexSet.range(n=num_seq, t=(t0, t0 + frames))
        values = {"input": input_matrix(rng, len(in_set), dim)}
        ref_inputs = {"input": rows_to_dict(in_set, values["input"])}
        # A request may provide only inputs the network has (a network of Consts has none).
        given_inputs = {"input": in_set} if reads_input(net) else {}
        values = {k: v for k, v in values.items() if k in given_inputs}
        candidates = range(t0 - 4, t0 + frames + 4)
        outputs, uncomputable = {}, {}
        for name, layer in net.outputs.items():
            ref = Reference(layer, ref_inputs, net.params, extra_roots=net.outputs.values())
            ok = [t for t in candidates if ref.value((0, t)) is not None]
            # In a regular request every sequence is alike.
            for n in range(1, num_seq):
                assert [t for t in candidates if ref.value((n, t)) is not None] == ok
            bad = [t for t in candidates if t not in ok]
            if bad:
                uncomputable[name] = data.draw(st.sampled_from(bad), label=f"bad t of {name}")
            if not ok:
                continue
            # Usually every sequence (a regular plan); sometimes some of them (an irregular plan).
            ns = range(num_seq)
            if not gen.has_recurrence and data.draw(st.integers(0, 3), label="some sequences") == 0:
                first = data.draw(st.integers(0, num_seq - 1), label="first n")
                ns = range(first, data.draw(st.integers(first + 1, num_seq), label="end n"))
            if data.draw(st.booleans(), label="contiguous"):
                runs = _runs(ok)
                lo, hi = data.draw(st.sampled_from(runs), label="run")
                a = data.draw(st.integers(lo, hi), label="a")
                b = data.draw(st.integers(a, hi), label="b")
                outputs[name] = IndexSet.range(n=ns, t=(a, b + 1))
            else:
                ts = data.draw(st.lists(st.sampled_from(ok), min_size=1, max_size=6, unique=True), label="ts")
                outputs[name] = IndexSet.of([(n, t) for t in sorted(ts) for n in ns])
        if outputs:
            req = ComputationRequest(inputs=given_inputs, outputs=outputs)
            check_against_reference(net, req, values, rng)
            event("checked against the reference")
        else:
            event("no computable output")
        for name, t in uncomputable.items():
            check_uncomputable(net, given_inputs, IndexSet.range(n=num_seq, t=(t, t + 1)), name)


@SETTINGS
@given(st.data())
def test_irregular_requests_match_reference(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    t0 = data.draw(st.integers(-3, 3), label="t0")
    frames = data.draw(st.integers(1, 6), label="T")
    dim = data.draw(st.integers(1, 3), label="dim")
    x_moves = data.draw(st.booleans(), label="x varies")
    xs = [0, 1] if x_moves else [0]
    with jax.enable_x64(True):
        gen = NetGen(data, rng, dim, x_moves=x_moves, recurrent=False, t_range=(t0, t0 + frames))
        net = draw_network(gen)
        universe = [(n, t, x) for n in range(3) for t in range(t0, t0 + frames) for x in xs]
        given_rows = data.draw(
            st.lists(st.sampled_from(universe), min_size=1, max_size=len(universe), unique=True), label="input Indexes"
        )
        in_set = IndexSet.of(given_rows)
        values = {"input": input_matrix(rng, len(in_set), dim)}
        ref_inputs = {"input": rows_to_dict(in_set, values["input"])}
        # A request may provide only inputs the network has (a network of Consts has none).
        given_inputs = {"input": in_set} if reads_input(net) else {}
        values = {k: v for k, v in values.items() if k in given_inputs}
        candidates = [Index(n, t, x) for n in range(3) for t in range(t0 - 3, t0 + frames + 3) for x in xs]
        outputs, uncomputable = {}, {}
        for name, layer in net.outputs.items():
            ref = Reference(layer, ref_inputs, net.params, extra_roots=net.outputs.values())
            ok = [i for i in candidates if ref.value(i) is not None]
            bad = [i for i in candidates if ref.value(i) is None]
            if bad:
                uncomputable[name] = data.draw(st.sampled_from(bad), label=f"bad Index of {name}")
            if ok:
                outputs[name] = data.draw(
                    st.lists(st.sampled_from(ok), min_size=1, max_size=10, unique=True), label=f"Indexes of {name}"
                )
        if outputs:
            req = ComputationRequest(inputs=given_inputs, outputs=outputs)
            check_against_reference(net, req, values, rng)
            event("checked against the reference")
        else:
            event("no computable output")
        for name, bad in uncomputable.items():
            check_uncomputable(net, given_inputs, [bad], name)


def _runs(ts: list[int]) -> list[tuple[int, int]]:
    runs, start = [], ts[0]
    for a, b in itertools.pairwise(ts):
        if b != a + 1:
            runs.append((start, a))
            start = b
    runs.append((start, ts[-1]))
    return runs


# ----- contexts and chunks ------------------------------------------------------------------------


def _modulus(net) -> int:
    from math import lcm

    from symnet._src.core.walk import walk

    m = 1
    for layer in walk([layer for _, layer in net.structure.outputs]):
        if isinstance(layer, Round):
            m = lcm(m, layer.t_modulus)
        elif isinstance(layer, Switch):
            m = lcm(m, len(layer.parts))
    return m


def reference_context(net, rng, dim: int) -> tuple[int, int] | None:
    """Kaldi's probe (ComputeSimpleNnetContext) run on the reference evaluator: None where it fails."""
    m = _modulus(net)
    for window in (40, 80, 160):
        found = []
        for start in range(m + 1):
            frames = range(start, start + window)
            rows = {Index(0, t): rng.normal(size=dim) for t in frames}
            ref = Reference(net.outputs["output"], {"input": rows}, net.params, extra_roots=net.outputs.values())
            ok = [ref.value(Index(0, t)) is not None for t in frames]
            if not any(ok):
                break
            first_ok = ok.index(True)
            first_not_ok = next((i for i in range(first_ok, window) if not ok[i]), window)
            found.append((first_ok, window - first_not_ok))
        else:
            return max(f[0] for f in found), max(f[1] for f in found)
    return None


@SETTINGS
@given(st.data())
def test_context_matches_kaldis_probe_on_the_reference(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    dim = data.draw(st.integers(1, 2), label="dim")
    with jax.enable_x64(True):
        gen = NetGen(
            data,
            rng,
            dim,
            x_moves=False,
            recurrent=data.draw(st.booleans(), label="recurrent"),
            t_range=(0, 8),
            replace_t=False,
        )
        net = symnet.Network({"output": gen.expr(gen.draw(st.integers(1, 3)))[0]})
        if not reads_input(net):
            return
        want = reference_context(net, rng, dim)
        if want is None:
            with pytest.raises(PlanError):
                net.context()
            event("no context")
        else:
            assert net.context() == want
            event("context checked")


@SETTINGS
@given(st.data())
def test_chunks_carrying_state_equal_one_pass(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    dim = data.draw(st.integers(1, 2), label="dim")
    frames = data.draw(st.integers(4, 12), label="T")
    chunk = data.draw(st.integers(1, 5), label="chunk")
    backward = data.draw(st.booleans(), label="backward recurrences too")
    with jax.enable_x64(True):
        gen = NetGen(
            data,
            rng,
            dim,
            x_moves=False,
            recurrent=True,
            t_range=(0, frames),
            replace_t=False,
            directions=(1, 2, -1) if backward else (1, 2),
        )
        net = symnet.Network({"output": gen.expr(gen.draw(st.integers(1, 3)))[0]})
        if not reads_input(net):
            return
        try:
            left, right = net.context()
        except PlanError:
            event("no context")
            return
        if frames <= left + right:
            return
        x = rng.normal(size=(2, frames, dim))
        whole = np.asarray(net.compute(x))
        try:
            chunked = np.asarray(net.compute(x, frames_per_chunk=chunk))
        except PlanError as e:
            assert backward and "backward recurrence" in str(e)
            event("backward recurrence refused")
            return
        np.testing.assert_allclose(chunked, whole, rtol=1e-9, atol=1e-10)
        event("chunked equals one pass")


# ----- bugs this file found, kept as regression tests ------------------------------------------------


def _gather_case():
    x = Input("input", 1)
    net = symnet.Network(ReplaceIndex(x, "t", 0))
    req = ComputationRequest(
        inputs={"input": IndexSet.range(n=1, t=(0, 12))}, outputs={"output": IndexSet.range(n=1, t=(0, 12))}
    )
    compile(net, req)(net, {"input": np.arange(12.0)[:, None]})


def _unused_operand_case():
    x = Input("input", 1)
    net = symnet.Network(IfDefined(Offset(x, 9)))
    req = ComputationRequest(
        inputs={"input": IndexSet.range(n=1, t=(0, 2))}, outputs={"output": IndexSet.range(n=1, t=(0, 2))}
    )
    compile(net, req)(net, {"input": np.zeros((2, 1))})


def _recurrent_failover_case(dim: int = 2):
    x = Input("input", dim)
    h = Node("probe_h", Sum(x, Failover(Offset(Ref("probe_h"), -1), Const(1.0, dim))))
    net = symnet.Network(h)
    req = ComputationRequest(
        inputs={"input": IndexSet.range(n=1, t=(0, 3))}, outputs={"output": IndexSet.range(n=1, t=(0, 3))}
    )
    values = np.repeat(np.array([[1.0], [2.0], [3.0]]), dim, axis=1)
    out = np.asarray(compile(net, req)(net, {"input": values})["output"])
    # h0 = x0 + 1 (no h at -1), h1 = x1 + h0, h2 = x2 + h1; taking the Const every time would give 2, 3, 4.
    np.testing.assert_allclose(out[:, 0], [2.0, 4.0, 7.0])


def _recurrence_of_dim_one_case():
    _recurrent_failover_case(dim=1)


def _relu_tie_case():
    x = Input("input", 1)
    net = symnet.Network(ReLU(x + Weight(0.0)))  # the pre-activation is exactly 0; d/dw = ReLU'(0)
    req = ComputationRequest(
        inputs={"input": IndexSet.range(n=1, t=(0, 1))}, outputs={"output": IndexSet.range(n=1, t=(0, 1))}
    )
    comp = compile(net, req, gradient="jax")  # JAX's own derivative at the tie, against the Tape's
    inp = {"input": np.zeros((1, 1))}
    a = comp.forward(net, inp)["output"].backward(1.0)
    b = jax.grad(lambda p: comp(net.replace(params=p), inp)["output"].sum())(net.params)
    for k in a:
        np.testing.assert_allclose(a[k], b[k])


def _numpy_forward_case():
    # Input rows n-major (not Kaldi's order): reordering them takes a gather, here run eagerly by `forward`.
    x = Input("input", 1)
    net = symnet.Network(x * Weight(2.0))
    rows = [(n, t) for n in range(3) for t in range(4)]
    comp = compile(net, ComputationRequest(inputs={"input": rows}, outputs={"output": [(0, 1), (2, 3)]}))
    value = comp.forward(net, {"input": np.arange(12.0)[:, None]})["output"].value
    np.testing.assert_allclose(np.asarray(value)[:, 0], [2.0, 22.0])


def test_recurrent_failover_takes_the_first_part_where_defined():
    with jax.enable_x64(True):
        _recurrent_failover_case()


def test_recurrence_of_dim_one():
    with jax.enable_x64(True):
        _recurrence_of_dim_one_case()


def test_relu_tie_gradient_matches_jax_grad():
    with jax.enable_x64(True):
        _relu_tie_case()


def test_output_tape_rows_are_the_requested_index_set():
    x = Input("input", 2)
    net = symnet.Network(Offset(x, 1))
    outs = IndexSet.range(n=2, t=(0, 3))
    req = ComputationRequest(inputs={"input": IndexSet.range(n=2, t=(0, 4))}, outputs={"output": outs})
    tape = compile(net, req).forward(net, {"input": np.zeros((8, 2))})["output"]
    assert isinstance(tape.rows, IndexSet)
    assert tape.rows == outs


def test_forward_with_numpy_inputs_in_any_order():
    with jax.enable_x64(True):
        _numpy_forward_case()


def test_reference_agrees_with_itself_in_jnp():
    # The jnp reference used for gradients gives the numpy reference's values.
    with jax.enable_x64(True):
        x = Input("input", 2)
        h = Node("h", Tanh(Append(x, IfDefined(Offset(Ref("h"), -1))) @ Weight(np.ones((4, 2)) * 0.3)))
        net = symnet.Network(Sum(Switch(h, Round(h, 2)), Failover(Offset(x, 1), Const(0.5, 2))))
        inputs = {"input": {Index(0, t): np.array([t, -t], float) for t in range(4)}}
        a = reference_outputs(net.outputs, inputs, net.params, {"output": [(0, t) for t in range(4)]})
        b = reference_outputs(net.outputs, inputs, net.params, {"output": [(0, t) for t in range(4)]}, xp=jnp)
        np.testing.assert_allclose(a["output"], np.asarray(b["output"]), rtol=1e-12)


def test_replace_index_needs_a_gather_and_runs():
    with jax.enable_x64(True):
        _gather_case()


def test_an_operand_no_row_reads_is_zeros_of_its_dim():
    with jax.enable_x64(True):
        _unused_operand_case()
