"""A descriptor defined outside the package runs end to end: planning, context, lowering, gradients.

`Swap(d)` is `d` at the other frame of its pair, `t xor 1` (0 <-> 1, 2 <-> 3,
-2 <-> -1): a per-Index map with a reach of one frame and a period of two,
which no built-in descriptor is. It declares only `map_keys` and its time
bounds; the planner, the context probe, the dims and the lowerings ask it.
The network feeds it an Offset of the input, runs a recurrence started by
IfDefined, and reads the recurrence back through it. Values and gradients are
checked against a per-Index evaluator written here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symnet
from symnet import Descriptor, Layer, Network, Weight, child, layer_class
from symnet._src.core.descriptor import Append, Combine, IfDefined, Input, Node, Offset, Ref
from symnet._src.core.index import IndexSet, decode, encode
from symnet.engine import ComputationRequest, compile

D_IN, D_H, D_OUT = 3, 4, 2


@layer_class
class Swap(Descriptor):
    """`arg` at the other frame of its pair: `(n, t xor 1, x)`."""

    arg: Layer = child()

    combine = Combine.FORWARD

    def map_keys(self, keys: np.ndarray) -> np.ndarray:
        n, t, x = decode(keys)
        return encode(n, t ^ 1, x)

    def time_reach(self) -> int:
        return 1

    def time_modulus(self) -> int:
        return 2


def build() -> Network:
    x = Input("input", D_IN)
    rng = np.random.default_rng(3)
    w1 = Weight(rng.normal(size=(2 * D_IN, D_H)) * 0.5, name="w1")
    u = Weight(rng.normal(size=(D_H, D_H)) * 0.5, name="u")
    w2 = Weight(rng.normal(size=(2 * D_H, D_OUT)) * 0.5, name="w2")
    a = Swap(Offset(x, 1))  # x at (t xor 1) + 1
    h = Node("h", symnet.Tanh(Append(a, x) @ w1 + IfDefined(Offset(Ref("h"), -1)) @ u))
    return Network(Append(h, Swap(Ref("h"))) @ w2)


def reference(params, X, frames):
    """The output at `frames` of every sequence, Index by Index (None where not computable); `jnp` throughout."""
    T = X.shape[1]
    memo: dict[int, object] = {}

    def x(t):
        return X[:, t] if 0 <= t < T else None

    def h(t):
        if t in memo:
            return memo[t]
        a, xt = x((t ^ 1) + 1), x(t)
        value = None
        if a is not None and xt is not None:
            prev = h(t - 1) if x(t - 1) is not None else None
            state = jnp.zeros((X.shape[0], D_H)) if prev is None else prev  # IfDefined: zeros where absent
            value = jnp.tanh(jnp.concatenate([a, xt], -1) @ params["w1"] + state @ params["u"])
        memo[t] = value
        return value

    out = []
    for t in frames:
        here, other = h(t), h(t ^ 1)
        assert here is not None and other is not None, f"frame {t} is not computable"
        out.append(jnp.concatenate([here, other], -1) @ params["w2"])
    return jnp.stack(out, axis=1)  # [N, frames, D_OUT]


def test_swap_context_and_values():
    net = build()
    left, right = net.context()
    # The output at t reads h at t and t xor 1, which read x there and at (t xor 1) + 1 and t + 1:
    # x at t .. t + 2 for an even t, t - 1 .. t + 1 for an odd one.
    assert (left, right) == (1, 2)
    X = np.random.default_rng(0).normal(size=(2, 9, D_IN))
    got = np.asarray(net.compute(X, mode="valid"))
    want = reference(net.params, jnp.asarray(X), range(left, 9 - right))
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-5, atol=1e-6)


def test_swap_gradients_match_jax_grad_of_reference():
    with jax.enable_x64(True):
        _check_gradients()


def _check_gradients():
    net = build()
    params = {k: jnp.asarray(v, jnp.float64) for k, v in net.params.items()}
    T, frames = 8, list(range(1, 5))
    X = np.random.default_rng(1).normal(size=(2, T, D_IN))
    req = ComputationRequest(
        inputs={"input": IndexSet.range(n=2, t=range(0, T))},
        outputs={"output": IndexSet.range(n=2, t=range(frames[0], frames[-1] + 1))},
    )
    comp = compile(net, req)
    values = {"input": X.transpose(1, 0, 2).reshape(-1, D_IN)}  # rows in (t, n) order
    tape = comp.forward(net.replace(params=params), values)["output"]
    got = np.asarray(tape.value).reshape(len(frames), 2, D_OUT).transpose(1, 0, 2)
    want = reference(params, jnp.asarray(X), frames)
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-10, atol=1e-12)
    delta = np.random.default_rng(2).normal(size=np.shape(tape.value))
    tape_grads = tape.backward(delta)
    ref_delta = jnp.asarray(delta).reshape(len(frames), 2, D_OUT).transpose(1, 0, 2)
    ref_grads = jax.grad(lambda p: jnp.sum(reference(p, jnp.asarray(X), frames) * ref_delta))(params)
    for name in params:
        np.testing.assert_allclose(np.asarray(tape_grads[name]), np.asarray(ref_grads[name]), rtol=1e-9, atol=1e-11)


def test_swap_is_not_kaldi_and_has_a_label():
    from symnet._src.display.labels import label
    from symnet._src.kaldi.text.descriptor_text import write_descriptor

    swap = Swap(Offset(Input("input", D_IN), 1))
    with pytest.raises(symnet.DescriptorError, match="Swap is not part of Kaldi's descriptor grammar"):
        write_descriptor(swap)
    assert label(swap) == "Swap"
    assert swap.shifts_time() and swap.time_offset() is None  # its own map: it may read another frame
