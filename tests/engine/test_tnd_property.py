"""Property test: a batched `[T, N, D]` call equals the flat call on random networks (values and backward).

The flat call (rows in (t, n) order) is checked against the per-Index reference
evaluator by tests/engine/test_engine_property.py; the batched call keeps values
`[T, N, D]` internally where layers allow, so this compares two lowerings.
"""

from __future__ import annotations

import os

import jax
import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from helpers.netgen import NetGen, draw_network, reads_input
from helpers.reference import Reference, rows_to_dict
from symnet._src.core.index import IndexSet
from symnet.engine import ComputationRequest, compile

SETTINGS = settings(
    max_examples=int(os.environ.get("SYMNET_PROPERTY_EXAMPLES", "5")),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


@SETTINGS
@given(st.data())
def test_batched_call_equals_flat_call(data: st.DataObject) -> None:
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    num_seq = data.draw(st.integers(1, 3), label="N")
    frames = data.draw(st.integers(1, 7), label="T")
    dim = data.draw(st.integers(1, 3), label="dim")
    with jax.enable_x64(True):
        gen = NetGen(data, rng, dim, x_moves=False, recurrent=True, t_range=(0, frames))
        net = draw_network(gen)
        if not reads_input(net):
            return
        in_set = IndexSet.range(n=num_seq, t=frames)
        flat_in = rng.normal(size=(len(in_set), dim))
        ref_inputs = {"input": rows_to_dict(in_set, flat_in)}
        outputs = {}
        for name, layer in net.outputs.items():
            ref = Reference(layer, ref_inputs, net.params, extra_roots=net.outputs.values())
            ok = [t for t in range(-3, frames + 3) if ref.value((0, t)) is not None]
            if ok:  # the first run of computable frames
                stop = ok[0] + 1
                while stop in ok:
                    stop += 1
                outputs[name] = IndexSet.range(n=num_seq, t=(ok[0], stop))
        if not outputs:
            event("no computable output")
            return
        event("compared")
        computation = compile(net, ComputationRequest(inputs={"input": in_set}, outputs=outputs))
        flat = computation.forward(net, {"input": flat_in})
        batched = computation.forward(net, {"input": flat_in.reshape(frames, num_seq, dim)})
        for name, tape in flat.items():
            rows = len(outputs[name]) // num_seq
            assert batched[name].value.shape == (rows, num_seq, tape.value.shape[-1])
            np.testing.assert_allclose(
                np.asarray(batched[name].value), np.asarray(tape.value).reshape(rows, num_seq, -1), rtol=1e-10
            )
            delta = rng.normal(size=tape.value.shape)
            want = tape.backward(delta)
            got = batched[name].backward(delta.reshape(rows, num_seq, -1))
            for k in want:
                np.testing.assert_allclose(np.asarray(got[k]), np.asarray(want[k]), rtol=1e-9, atol=1e-12, err_msg=k)
