"""Typed layers as users meet them: time convolution over frames, Kaldi export, repr and HTML, option errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symnet.display  # noqa: F401  (registers the notebook renderers)
from symnet import Input, Network, Node, ReLU
from symnet.errors import ConfigWriteError, LayerOptionError, ShapeError, SymnetError, UnknownOptionError
from symnet.kaldi import parse_network, write_network
from symnet.layers import AvgPool2d, BatchNorm, Conv2d, Dropout, Flatten, LayerNorm, MaxPool2d, Reshape, TimeConv

RNG = np.random.default_rng(1)


def randomised(net: Network) -> Network:
    return net.replace(params={n: RNG.standard_normal(v.shape).astype(np.float32) for n, v in net.params.items()})


def time_conv_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray, offsets: tuple[int, ...]) -> np.ndarray:
    """y(t) = W [x(t + o) for o] + b with the edge frames repeated (nnet3-compute's padding)."""
    n, t, _ = x.shape
    cols = [x[:, np.clip(np.arange(t) + o, 0, t - 1), :] for o in offsets]
    return np.concatenate(cols, -1) @ w.T + b


@pytest.mark.parametrize("offsets", [(-1, 0, 1), (-3, 0, 3), (0,), (-2, 1)])
def test_time_conv_is_an_affine_map_of_spliced_frames(offsets: tuple[int, ...]) -> None:
    net = randomised(Network(Node("tdnn", TimeConv(Input("input", 4), 5, offsets=offsets))))
    x = RNG.standard_normal((2, 11, 4)).astype(np.float32)
    w, b = np.asarray(net.params["tdnn.linear_params"]), np.asarray(net.params["tdnn.bias_params"])
    assert w.shape == (5, 4 * len(offsets))
    np.testing.assert_allclose(net.compute(x), time_conv_reference(x, w, b, offsets), rtol=1e-4, atol=1e-5)
    assert net.context() == (max(0, -min(offsets)), max(0, max(offsets)))


def test_time_conv_gradient_is_that_of_the_reference() -> None:
    net = randomised(Network(Node("tdnn", TimeConv(Input("input", 3), 2, offsets=(-1, 0, 2)))))
    x = RNG.standard_normal((1, 8, 3)).astype(np.float32)
    g = RNG.standard_normal((1, 8, 2)).astype(np.float32)

    def loss(params: dict[str, jax.Array]) -> jax.Array:
        return jnp.sum(net.replace(params=params).compute(x) * g)

    def ref(w: jax.Array, b: jax.Array) -> jax.Array:
        t = x.shape[1]
        spliced = jnp.concatenate([x[:, np.clip(np.arange(t) + o, 0, t - 1), :] for o in (-1, 0, 2)], -1)
        return jnp.sum((spliced @ w.T + b) * g)

    got = jax.grad(loss)(net.params)
    dw, db = jax.grad(ref, argnums=(0, 1))(net.params["tdnn.linear_params"], net.params["tdnn.bias_params"])
    np.testing.assert_allclose(got["tdnn.linear_params"], dw, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["tdnn.bias_params"], db, rtol=1e-4, atol=1e-5)


def test_time_conv_with_a_stride_holds_every_strided_frame() -> None:
    net = randomised(Network(Node("tdnn", TimeConv(Input("input", 3), 4, offsets=(-1, 0, 1), stride=3))))
    x = RNG.standard_normal((1, 9, 3)).astype(np.float32)
    w, b = np.asarray(net.params["tdnn.linear_params"]), np.asarray(net.params["tdnn.bias_params"])
    full = time_conv_reference(x, w, b, (-1, 0, 1))
    np.testing.assert_allclose(net.compute(x), full[:, (np.arange(9) // 3) * 3], rtol=1e-4, atol=1e-5)


def test_kaldi_export_writes_the_components_and_reads_back_with_equal_outputs() -> None:
    x = Input("input", 36)
    h = Node("tdnn1", TimeConv(x, 8, offsets=(-1, 0, 1)))
    bn = Node("bn1", BatchNorm(h))
    drop = Node("drop1", Dropout(bn, 0.2, test_mode=True))
    img = Node("conv1", Conv2d(Reshape(drop, (2, 4, 1)), 3, (2, 2)))
    out = Node("pool1", MaxPool2d(img, (1, 3)))
    net = randomised(Network(out))
    text = write_network(net)
    for kind in (
        "TdnnComponent",
        "BatchNormComponent",
        "GeneralDropoutComponent",
        "ConvolutionComponent",
        "MaxpoolingComponent",
    ):
        assert f"type={kind}" in text
    back = parse_network(text)
    back = back.replace(params={n: net.params[n] for n in back.params})
    x_in = RNG.standard_normal((1, 6, 36)).astype(np.float32)
    np.testing.assert_allclose(back.compute(x_in), net.compute(x_in), rtol=1e-4, atol=1e-5)


def test_the_readmes_typed_tdnn_exports_with_the_nodes_kaldi_needs(tmp_path) -> None:
    """Typed layers inside a Node and nonlinearities outside components: symnet names the nodes Kaldi needs
    (as Kaldi's xconfig does: tdnn1.relu), and the config and the model file read back compute the same."""
    from symnet import LogSoftmax
    from symnet.components import set_test_mode
    from symnet.kaldi import read_model, write_model
    from symnet.layers import Affine

    x = Input("input", 40)
    h = Node("tdnn1", BatchNorm(ReLU(TimeConv(x, 16, offsets=(-1, 0, 1)))))
    strided = TimeConv(h, 8, offsets=(-2, 0, 2), stride=2)
    net = randomised(Network(LogSoftmax(Node("out", Affine(strided, 10)))))
    text = write_network(net)
    for line in (
        "component-node name=tdnn1.timeconv component=tdnn1.timeconv input=input",
        "component name=tdnn1.relu type=RectifiedLinearComponent dim=16",
        "component-node name=tdnn1 component=tdnn1 input=tdnn1.relu",
        "component-node name=out component=out input=Round(",
        "component name=out.log-softmax type=LogSoftmaxComponent dim=10",
        "output-node name=output input=out.log-softmax objective=linear",
    ):
        assert line in text, text
    features = RNG.standard_normal((2, 12, 40)).astype(np.float32)
    want = set_test_mode(net, True).compute(features)
    back = parse_network(text)
    back = back.replace(params={n: net.values[n] for n in back.params})
    np.testing.assert_allclose(set_test_mode(back, True).compute(features), want, rtol=1e-5, atol=1e-5)
    write_model(tmp_path / "tdnn.raw", net)
    model = read_model(tmp_path / "tdnn.raw").network
    np.testing.assert_allclose(set_test_mode(model, True).compute(features), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "layer, message",
    [
        (lambda x: LayerNorm(x), "no Kaldi component"),
        (lambda x: AvgPool2d(Reshape(x, (6, 6, 1)), 2), "average-pooling"),
        (lambda x: Conv2d(Reshape(x, (6, 6, 1)), 2, 3, padding=1), "padding"),
    ],
)
def test_kaldi_export_says_what_kaldi_lacks(layer, message: str) -> None:
    with pytest.raises(ConfigWriteError, match=message):
        write_network(Network(Node("n", layer(Input("input", 36)))))


def test_repr_shows_the_options_given_and_html_renders() -> None:
    img = Reshape(Input("input", 784), (28, 28, 1))
    conv = Conv2d(img, 16, 5, stride=2, padding="same")
    assert repr(conv) == "Conv2d(Reshape(Input('input', 784), (28, 28, 1)), 16, 5, stride=2, padding='same')"
    assert repr(MaxPool2d(conv, 2)).startswith("MaxPool2d(Conv2d(")
    assert repr(Dropout(Input("input", 4), 0.1)) == "Dropout(Input('input', 4), 0.1)"
    assert conv.image_shape == (14, 14, 16) and Flatten(conv).output_dim == 14 * 14 * 16
    html = Network(Node("c", conv))._repr_html_()
    assert "Conv2d" in html


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda x: Dropout(x, 1.5), "proportion must be a number in"),
        (lambda x: Conv2d(Reshape(x, (6, 6, 1)), 0), "out_channels must be a positive integer"),
        (lambda x: Conv2d(Reshape(x, (6, 6, 1)), 2, (3, 3, 3)), "kernel must be an integer or a pair"),
        (lambda x: MaxPool2d(Reshape(x, (6, 6, 1)), 2, padding=-1), "padding must be"),
        (lambda x: TimeConv(x, 4, offsets=(0, 0)), "offsets must be distinct integers"),
        (lambda x: BatchNorm(x, epsilon=0), "epsilon must be a positive number"),
        (lambda x: Reshape(x, (6, 0)), "shape must be a tuple of positive integers"),
        # a misspelled option (docs/concepts/typed-layers.md): the layer, the nearest option, the line
        (lambda x: TimeConv(x, 4, offset=(-1, 0)), "TimeConv takes no option 'offset': did you mean 'offsets'"),
        (lambda x: BatchNorm(x, epsilom=1e-3), "BatchNorm takes no option 'epsilom': did you mean 'epsilon'"),
        (lambda x: Conv2d(Reshape(x, (6, 6, 1)), 2, kernal=3), "Conv2d takes no option 'kernal': did you mean"),
    ],
)
def test_bad_options_raise_layer_option_errors_naming_the_layer_and_line(build, message: str) -> None:
    with pytest.raises(LayerOptionError, match=message) as info:
        build(Input("input", 36))
    assert "test_layers_api.py" in str(info.value)


def test_a_misspelled_keyword_is_also_a_type_error_listing_the_options() -> None:
    """As Python's own error for a bad keyword (code that catches TypeError keeps working), for every layer."""
    from symnet import Offset

    with pytest.raises(TypeError, match=r"its options are out_dim, offsets, stride, bias, name \(built at"):
        TimeConv(Input("input", 3), 4, offsetz=(0,))
    with pytest.raises(UnknownOptionError, match="Offset takes no option 't_ofset': did you mean 't_offset'"):
        Offset(Input("input", 3), t_ofset=1)


def test_the_layer_functions_name_a_misspelled_option_and_the_users_line() -> None:
    """Before: `LSTM("l", x, cel=256)` was Python's bare TypeError; the typed-layer docs promise this."""
    from symnet.layers import GRU, LSTM, Bidirectional, MultiHeadAttention

    x = Input("input", 10)
    line = f"test_layers_api.py:{_line() + 2}"
    with pytest.raises(UnknownOptionError, match=f"LSTM takes no option 'cel': did you mean 'cell'.*{line}"):
        LSTM("l", x, cel=256)
    with pytest.raises(UnknownOptionError, match="did you mean 'cell'"):
        Bidirectional(LSTM, "b", x, cel=3)  # the layer it wraps says so
    with pytest.raises(UnknownOptionError, match="MultiHeadAttention takes no option 'head': did you mean 'heads'"):
        MultiHeadAttention("a", x, head=2, key_dim=4)
    with pytest.raises(LayerOptionError, match="GRU: missing a required argument: 'cell'"):
        GRU("g", x)
    assert isinstance(UnknownOptionError("x"), TypeError)  # still a TypeError, as Python's own


def _line() -> int:
    import inspect

    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno


def test_shape_errors_name_the_layer() -> None:
    with pytest.raises(ShapeError, match="Conv2d.*image shape"):
        Conv2d(Input("input", 36), 2)
    with pytest.raises(ShapeError, match="MaxPool2d.*does not fit"):
        MaxPool2d(Reshape(Input("input", 4), (2, 2, 1)), 3)
    from symnet import Identity

    with pytest.raises(ShapeError, match="BatchNorm.*give it as dim="):
        BatchNorm(ReLU(Identity()))


def test_a_dropout_layer_in_training_mode_without_randomness_names_itself() -> None:
    net = Network(Node("drop", Dropout(Input("input", 3), 0.5)))
    with pytest.raises(SymnetError, match="Dropout 'drop' needs random numbers in training mode"):
        net(jnp.ones((4, 3)))
