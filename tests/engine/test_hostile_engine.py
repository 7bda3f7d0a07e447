"""The engine on hostile use: a Computation refuses a network it was not compiled for, and NaN propagates
through every nonlinearity as in Kaldi's arithmetic (an all-NaN utterance never looks plausible)."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest

from symnet import (
    ComputationRequest,
    IndexSet,
    Input,
    Network,
    Node,
    Normal,
    Offset,
    PlanError,
    ReLU,
    ShapeError,
    Weight,
    compile,
)
from symnet._src.kaldi.components.registry import build_component


def request(left: int = 1, frames: int = 4) -> ComputationRequest:
    return ComputationRequest(
        inputs={"input": IndexSet.range(n=1, t=(-left, frames + 1))}, outputs={"output": IndexSet.range(n=1, t=frames)}
    )


def test_a_computation_refuses_another_network() -> None:
    """Before: it ran the first network's structure with the second one's parameters."""
    x = Input("input", 2)
    first, second = Network(Offset(x, 1)), Network(Offset(x, -1))
    computation = compile(first, request())
    X = np.arange(12, dtype=np.float32).reshape(6, 2)
    np.testing.assert_array_equal(computation(first, {"input": X})["output"], X[2:6])
    for other in (second, X, None):
        with pytest.raises(PlanError, match="compiled for a different network structure"):
            computation(other, {"input": X})
        with pytest.raises(PlanError, match="compiled for a different network structure"):
            computation.forward(other, {"input": X})


def test_a_computation_takes_a_network_with_the_same_structure_and_new_parameters() -> None:
    x = Input("input", 2)
    net = Network(ReLU(x @ Weight(Normal((2, 3), 1.0), name="w")))
    computation = compile(net, request(left=0))
    other = net.replace(params={"w": np.ones((2, 3), np.float32)})
    X = np.ones((5, 2), np.float32)
    np.testing.assert_array_equal(computation(other, {"input": X})["output"], np.full((4, 3), 2.0))
    jitted = jax.jit(lambda n, v: computation(n, {"input": v})["output"])  # traced networks keep the structure
    np.testing.assert_array_equal(jitted(other, X), np.full((4, 3), 2.0))


def test_relu_keeps_nan() -> None:
    """Before: ReLU was where(a > 0, a, 0), which maps NaN to 0."""
    x = Input("input", 3)
    y = np.asarray(Network(ReLU(x)).compute(np.array([[[np.nan, -1.0, 2.0]]], np.float32)))
    assert np.isnan(y[0, 0, 0]) and y[0, 0, 1] == 0.0 and y[0, 0, 2] == 2.0


NONLINEAR: dict[str, tuple[dict[str, Any], int]] = {
    "RectifiedLinearComponent": ({"dim": 4}, 4),
    "SigmoidComponent": ({"dim": 4}, 4),
    "TanhComponent": ({"dim": 4}, 4),
    "SoftmaxComponent": ({"dim": 4}, 4),
    "LogSoftmaxComponent": ({"dim": 4}, 4),
    "PnormComponent": ({"input-dim": 4, "output-dim": 2}, 4),
    "NormalizeComponent": ({"input-dim": 4}, 4),
    "BatchNormComponent": ({"dim": 4, "test-mode": "true"}, 4),
    "ClipGradientComponent": ({"dim": 4}, 4),
    "BackpropTruncationComponent": ({"dim": 4}, 4),
    "DropoutComponent": ({"dim": 4, "dropout-proportion": 0.5, "test-mode": "true"}, 4),
    "AffineComponent": ({"input-dim": 4, "output-dim": 3}, 4),
    "LstmNonlinearityComponent": ({"cell-dim": 3}, 15),
    "GruNonlinearityComponent": ({"cell-dim": 4, "recurrent-dim": 2}, 16),
    "ElementwiseProductComponent": ({"input-dim": 4, "output-dim": 2}, 4),
    "SumGroupComponent": ({"sizes": "1,3"}, 4),
    "ScaleAndOffsetComponent": ({"dim": 4}, 4),
}


@pytest.mark.parametrize("kind", NONLINEAR)
def test_nan_in_one_frame_is_nan_in_that_frame_of_the_output_only(kind: str) -> None:
    options, dim = NONLINEAR[kind]
    net = Network(Node("c", build_component(kind, "c", options, Input("input", dim))), seed=0)
    X = np.ones((1, 5, dim), np.float32)
    X[0, 2, 0] = np.nan
    y = np.asarray(net.compute(X))
    assert np.isnan(y[0]).any(axis=-1).tolist() == [False, False, True, False, False]


BAD_COMPUTE: dict[str, tuple[tuple[Any, ...], dict[str, Any], type[Exception], str]] = {
    "no sequences": ((np.zeros((0, 5, 2), np.float32),), {}, ShapeError, r"N = 0"),
    "mixed dims": (([np.zeros((5, 2)), np.zeros((5, 3))],), {}, ShapeError, "sequence 1 has 3 features"),
    "None": ((None,), {}, ShapeError, "got a NoneType"),
    "a string": (("abc",), {}, ShapeError, "got a str"),
    "strings": ((np.array([[["a", "b"]]]),), {}, ShapeError, "expected numbers"),
    "no frames": ((np.zeros((1, 0, 2), np.float32),), {}, ShapeError, "has no frames"),
    "fractional chunk": ((np.zeros((1, 5, 2), np.float32),), {"frames_per_chunk": 2.5}, PlanError, "got 2.5"),
    "string chunk": ((np.zeros((1, 5, 2), np.float32),), {"frames_per_chunk": "3"}, PlanError, "got '3'"),
}


@pytest.mark.parametrize("case", BAD_COMPUTE)
def test_compute_of_bad_inputs_is_a_symnet_error_naming_the_value(case: str) -> None:
    args, kwargs, error, message = BAD_COMPUTE[case]
    net = Network(ReLU(Input("input", 2) @ Weight(Normal((2, 3), 1.0), name="w")))
    with pytest.raises(error, match=message):
        net.compute(*args, **kwargs)
