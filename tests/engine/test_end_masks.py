"""`Computation.end_masks`: sequence ends planned outside a user's `jax.jit`, passed in as arrays."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from symnet import IfDefined, Input, Network, Node, Normal, Offset, PlanError, Ref, Tanh, Weight
from symnet._src.core.index import IndexSet
from symnet.engine import ComputationRequest, compile


def backward_rnn(dim: int = 3) -> Network:
    x = Input("input", dim)
    h = Node(
        "h",
        Tanh(x @ Weight(Normal((dim, dim), 0.8)) + IfDefined(Offset(Ref("h"), 1)) @ Weight(Normal((dim, dim), 0.8))),
    )
    return Network(h, seed=0)


def request(n: int, frames: int, ends: bool = True) -> ComputationRequest:
    return ComputationRequest(
        inputs={"input": IndexSet.range(n=n, t=frames)},
        outputs={"output": IndexSet.range(n=n, t=frames)},
        sequence_ends=ends,
    )


def test_masks_made_outside_a_jit_give_the_call_with_ends():
    net = backward_rnn()
    computation = compile(net, request(3, 6))
    x = np.random.default_rng(0).standard_normal((6, 3, 3)).astype(np.float32)
    ends = [6, 2, 4]
    want = np.asarray(computation(net, {"input": x}, ends=ends)["output"])
    masks = computation.end_masks(ends)
    jitted = jax.jit(lambda params, x, masks: computation(net.replace(params=params), {"input": x}, masks)["output"])
    np.testing.assert_allclose(np.asarray(jitted(net.params, x, masks)), want, rtol=1e-6, atol=1e-6)
    for n, end in enumerate(ends):  # each sequence as if it ended there: its backward recurrence starts at end - 1
        alone = compile(net, request(1, end, ends=False))(net, {"input": x[:end, n : n + 1]})["output"]
        np.testing.assert_allclose(want[:end, n], np.asarray(alone)[:, 0], rtol=1e-5, atol=1e-6)


def test_end_masks_need_a_request_with_sequence_ends_and_its_own_computation():
    net = backward_rnn()
    with pytest.raises(PlanError, match="sequence_ends"):
        compile(net, request(2, 4, ends=False)).end_masks([4, 2])
    computation = compile(net, request(2, 4))
    masks = computation.end_masks([4, 2])
    with pytest.raises(PlanError, match="end masks"):
        computation(net, {"input": np.zeros((4, 2, 3), np.float32)}, type(masks)(masks.masks * 2))
