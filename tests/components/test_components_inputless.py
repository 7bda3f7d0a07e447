"""Kaldi's components that read no input (ConstantComponent, DropoutMaskComponent) and GeneralDropout's
SpecAugment options, checked against Kaldi's rules (nnet-general-component.cc/.h): a component that reads no
input Indexes makes every output Index computable, whatever the input gives; its node is written
`input=<itself>` in Kaldi's configs (the generator's and xconfig's), which is no cycle.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from symnet._src.core import rng
from symnet._src.core.descriptor import Ref
from symnet._src.core.index import IndexSet
from symnet.components import ComponentConfigError, ComponentModeError, set_test_mode
from symnet.engine import ComputationRequest, compile
from symnet.kaldi import COMPONENTS, format_model, parse_model, parse_network, write_network


def _outputs(net, inputs, outputs, values):
    request = ComputationRequest(inputs=inputs, outputs=outputs)
    return {k: np.asarray(v) for k, v in compile(net, request)(net, values).items()}


CONSTANT_NET = """\
input-node name=input dim=2
component name=c0 type=ConstantComponent output-dim=3 output-mean=0.5
component name=a type=AffineComponent input-dim=5 output-dim=2
component-node name=c0 component=c0 input=c0
component-node name=a component=a input=Append(input, Failover(Offset(c0, -1), c0))
output-node name=output input=Append(a, c0)
"""


def test_constant_component_is_computable_everywhere_and_outputs_its_vector():
    kn = parse_network(CONSTANT_NET)
    net = kn
    value = np.array([1.0, -2.0, 3.0], np.float32)
    net = net.replace(params={**net.params, "c0.output": value})
    assert net.context() == (0, 0)
    out = _outputs(
        net,
        {"input": IndexSet.range(n=1, t=(0, 4))},
        {"output": IndexSet.range(n=1, t=(0, 4))},
        {"input": np.ones((4, 2), np.float32)},
    )["output"]
    np.testing.assert_array_equal(out[:, 2:], np.tile(value, (4, 1)))
    # The node reads nothing, so it is computable outside the input's frames too.
    only_c0 = _outputs(
        net,
        {"input": IndexSet.range(n=1, t=(0, 1))},
        {"c0": IndexSet.range(n=2, t=(-50, 50))},
        {"input": np.ones((1, 2), np.float32)},
    )["c0"]
    np.testing.assert_array_equal(only_c0, np.tile(value, (200, 1)))


def test_constant_component_initialises_writes_and_reads_back():
    kn = parse_network(CONSTANT_NET)
    np.testing.assert_array_equal(kn.params["c0.output"], np.full(3, 0.5, np.float32))
    assert "component-node name=c0 component=c0 input=c0" in write_network(kn)
    assert parse_network(write_network(kn)).structure == kn.structure
    frames = IndexSet.range(n=1, t=(0, 3))
    want = _outputs(kn, {"input": frames}, {"output": frames}, {"input": np.ones((3, 2), np.float32)})
    for binary in (False, True):
        model = parse_model(format_model(kn, binary=binary))  # a model file keeps values, not initialisers
        assert dict(model.network.params).keys() == dict(kn.params).keys()
        got = _outputs(model.network, {"input": frames}, {"output": frames}, {"input": np.ones((3, 2), np.float32)})
        np.testing.assert_allclose(got["output"], want["output"], rtol=1e-5, atol=1e-6)
        assert format_model(model, binary=binary) == format_model(kn, binary=binary)
    fixed = COMPONENTS["ConstantComponent"]("c", {"output-dim": 2, "is-updatable": "false"}, Ref("c"))
    assert type(fixed.output).__name__ == "FixedWeight"


def test_constant_component_bad_options():
    for options, option in [
        ({}, "output-dim"),
        ({"output-dim": 0}, "output-dim"),
        ({"output-dim": 2, "bogus": 1}, "bogus"),
    ]:
        with pytest.raises(ComponentConfigError) as info:
            COMPONENTS["ConstantComponent"]("c", options, Ref("c"))
        assert info.value.option == option


def _mask_net(options: str):
    return parse_network(
        "input-node name=input dim=1\n"
        f"component name=m type=DropoutMaskComponent {options}\n"
        "component-node name=m component=m input=m\n"
        "output-node name=output input=Append(input, m)\n"
    )


def _mask(net, rows: int = 4000):
    frames = IndexSet.range(n=rows // 10, t=(0, 10))
    return _outputs(net, {"input": frames}, {"output": frames}, {"input": np.zeros((rows, 1), np.float32)})["output"][
        :, 1:
    ]


def test_dropout_mask_test_mode_is_its_expectation():
    np.testing.assert_array_equal(
        _mask(set_test_mode(_mask_net("output-dim=3 dropout-proportion=0.2")), 20), np.full((20, 3), 0.8, np.float32)
    )
    np.testing.assert_array_equal(
        _mask(set_test_mode(_mask_net("output-dim=2 dropout-proportion=0.2 continuous=true")), 20), np.ones((20, 2))
    )
    np.testing.assert_array_equal(_mask(_mask_net("output-dim=2 dropout-proportion=0")), np.ones((4000, 2)))


def test_dropout_mask_training_mode_draws_kaldis_masks():
    with rng.randomness(jax.random.key(0)):
        lstm = _mask(_mask_net("output-dim=3 dropout-proportion=0.3"))
        plain = _mask(_mask_net("output-dim=4 dropout-proportion=0.3"))
        smooth = _mask(_mask_net("output-dim=1 dropout-proportion=0.25 continuous=true"))
    assert set(np.unique(lstm)) <= {0.0, 1.0} and set(np.unique(plain)) <= {0.0, 1.0}
    # With 2 or 3 columns the first two come from one draw u: (u > p, u < 1 - p), never both zero (p < 0.5).
    assert not ((lstm[:, 0] == 0) & (lstm[:, 1] == 0)).any()
    for column in (*lstm.T, *plain.T):
        assert abs(column.mean() - 0.7) < 0.04
    assert smooth.min() >= 0.5 and smooth.max() <= 1.5 and abs(smooth.mean() - 1.0) < 0.03


def test_dropout_mask_bad_options():
    for options, option in [
        ({"output-dim": 2, "dropout-proportion": 1.5}, "dropout-proportion"),
        ({"dropout-proportion": 0.5}, "output-dim"),
    ]:
        with pytest.raises(ComponentConfigError) as info:
            COMPONENTS["DropoutMaskComponent"]("m", options, Ref("m"))
        assert info.value.option == option


def test_general_dropout_reads_spec_augment_options():
    gd = COMPONENTS["GeneralDropoutComponent"]
    c = gd("f", {"dim": 6, "specaugment-max-proportion": "0.5", "specaugment-max-regions": "2"}, Ref("x"))
    assert (c.specaugment_max_proportion, c.specaugment_max_regions) == (0.5, 2)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    np.testing.assert_array_equal(set_test_mode(c).apply(x), x)  # the identity in test mode, as in Kaldi
    with rng.randomness(jax.random.key(0)), pytest.raises(ComponentModeError, match="SpecAugment"):
        c.apply(x)
    for options, option in [
        ({"dim": 6, "specaugment-max-proportion": 1.5}, "specaugment-max-proportion"),
        ({"dim": 6, "block-dim": 3, "specaugment-max-proportion": 0.5}, "block-dim"),
        ({"dim": 6, "continuous": "true", "specaugment-max-proportion": 0.5}, "continuous"),
        ({"dim": 6, "specaugment-max-proportion": 0.5, "specaugment-max-regions": 0}, "specaugment-max-regions"),
    ]:
        with pytest.raises(ComponentConfigError) as info:
            gd("f", options, Ref("x"))
        assert info.value.option == option
