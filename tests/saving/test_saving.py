"""`symnet.save` / `symnet.load` round trips: every layer class, every component type, random descriptor
graphs and recurrences, multi-output networks, shared Weights, state, Literal arrays, users' layer classes.

Each round trip must give an equal structure (`==`), the same arrays, and the same outputs computed from
the loaded network (compiled afresh, after `symnet.clear_caches()`).
"""

from __future__ import annotations

import json
import pathlib
import time
import zipfile
from typing import Any

import attrs
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symnet
from helpers import EXAMPLES
from helpers.component_samples import NONSIMPLE_SAMPLES, SAMPLES
from helpers.netgen import NetGen, draw_network, reads_input
from symnet import (
    Append,
    Const,
    DimRange,
    Divide,
    Exp,
    Failover,
    FixedWeight,
    Full,
    Glorot,
    Identity,
    IfDefined,
    Input,
    Literal,
    Log,
    LogSoftmax,
    Network,
    Node,
    Normal,
    Offset,
    Power,
    Ref,
    ReLU,
    ReplaceIndex,
    Round,
    Scale,
    Sigmoid,
    Softmax,
    Sum,
    Switch,
    Tanh,
    Uniform,
    Weight,
    Zeros,
)
from symnet._src.core.index import IndexSet
from symnet._src.core.layer import Layer, child
from symnet._src.core.registry import INITIALIZER_CLASSES, LAYER_CLASSES
from symnet._src.core.walk import walk
from symnet._src.engine.graph import Graph
from symnet._src.engine.plan import Planner
from symnet.components import set_test_mode
from symnet.engine import ComputationRequest, compile
from symnet.errors import SaveError
from symnet.kaldi import COMPONENTS, read_network
from symnet.layers import (
    Affine,
    AvgPool2d,
    BatchNorm,
    Conv2d,
    Dropout,
    Flatten,
    LayerNorm,
    MaxPool2d,
    Reshape,
    TimeConv,
)


def round_trip(tmp_path: pathlib.Path, network: Any, name: str = "net.npz") -> Any:
    path = tmp_path / name
    symnet.save(path, network)
    loaded: Any = symnet.load(path)
    inner, original = loaded, network
    assert type(loaded) is type(network)
    assert dict(loaded.objectives) == dict(network.objectives)
    assert inner.structure == original.structure
    assert list(inner.params) == list(original.params) and list(inner.state) == list(original.state)
    for key, value in original.values.items():
        got = np.asarray(inner.values[key])
        assert got.dtype == np.asarray(value).dtype and np.array_equal(got, np.asarray(value)), key
    return loaded


def same_outputs(a: Network, b: Network, frames: int = 7) -> None:
    """Both networks' outputs on the same random input frames, through `compute` (compiled afresh for `b`)."""
    rng = np.random.default_rng(0)
    inputs = {
        layer.name: layer.dim for layer in walk(root for _, root in a.structure.outputs) if isinstance(layer, Input)
    }
    x = {name: rng.standard_normal((2, frames, d)).astype(np.float32) for name, d in inputs.items()}
    feed = x if len(x) > 1 else next(iter(x.values()))
    want = a.compute(feed, mode="same")
    symnet.clear_caches()
    got = b.compute(feed, mode="same")
    for key in want if isinstance(want, dict) else [None]:
        w, g = (want[key], got[key]) if key is not None else (want, got)
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def same_requested_outputs(a: Network, b: Network, request: ComputationRequest, values: dict[str, Any]) -> None:
    """Both networks' outputs for one request (compiled afresh for `b`)."""
    want = compile(a, request)(a, values)
    symnet.clear_caches()
    got = compile(b, request)(b, values)
    for key in request.outputs:
        np.testing.assert_array_equal(np.asarray(got[key]), np.asarray(want[key]))


# ----- core layers and descriptors ----------------------------------------------------------------------


def core_networks() -> dict[str, Network]:
    x = Input("input", 3)
    w = Weight(Normal((3, 3), 0.5), name="shared")  # one Weight used twice: one parameter
    h = Node("h", Tanh(Append(Offset(x, -1), x, Offset(x, 1, 0)) @ Weight(Glorot((9, 3))) + Weight(Zeros(3))))
    r = Node("r", Sigmoid(h @ w + IfDefined(Offset(Ref("r"), -1)) @ w))  # a recurrence through a Ref
    mixed = Sum(
        Failover(Offset(r, 2), Const(0.5, 3)),
        Switch(x, Scale(-2.0, x)),
        Round(x, 2),
        ReplaceIndex(x, "x", 0),
        DimRange(Append(x, x), 2, 3),
    )
    arith = (
        Exp(Tanh(mixed)) * Literal(np.linspace(0.5, 1.5, 3))
        - Log(Sigmoid(x) + 0.5)
        + Divide(x, Softmax(x) + 1.0)
        + (-x) ** 2.0
        + ReLU(x) * FixedWeight(Uniform((3,), -1.0, 2.0))
        + Power(x, 3.0) * Weight(np.array([1.0, 2.0, 3.0]))
        + x * Weight(Full((3,), 0.25))
    )
    t = Node("tc", ReLU(TimeConv(x, 4, offsets=(-1, 0, 1))))
    t = Dropout(Node("ln", LayerNorm(Node("bn", BatchNorm(t)))), 0.1, test_mode=True)
    image = Reshape(Input("image", 36), (6, 6, 1))
    conv = Node("conv", ReLU(Conv2d(image, 2, kernel=3)))
    pooled = Flatten(AvgPool2d(MaxPool2d(conv, 2, stride=1), 2, stride=1))
    typed = Network({"output": LogSoftmax(Node("fc", Affine(t, 2))), "image": Node("fc2", Affine(pooled, 2))})
    return {
        "descriptors": Network({"output": LogSoftmax(arith @ Weight(Normal((3, 2), 0.1))), "aux": r}),
        "typed layers": typed,
        "plain": Network((1.0 + Identity()) * Weight(2.0)),
        "literal arrays": Network(
            Input("input", 2) * Literal(np.array([1, 2], dtype=np.int32)) + np.array([0.5, 0.25])
        ),
    }


def test_core_layers_and_descriptors_round_trip(tmp_path: pathlib.Path) -> None:
    for name, net in core_networks().items():
        loaded = round_trip(tmp_path, net)
        if name == "plain":
            np.testing.assert_array_equal(np.asarray(loaded(jnp.arange(3.0))), np.asarray(net(jnp.arange(3.0))))
        else:
            same_outputs(net, loaded)


def test_trained_values_and_state_are_kept_not_reinitialised(tmp_path: pathlib.Path) -> None:
    net = core_networks()["descriptors"]
    changed = net.assign({name: jnp.full(np.shape(v), 0.125) for name, v in net.values.items()})
    assert net.state and changed.state
    loaded = round_trip(tmp_path, changed)
    for name in net.values:
        assert np.all(np.asarray(loaded.values[name]) == 0.125), name
    assert set(loaded.state) == set(net.state) and set(loaded.params) == set(net.params)


def test_shared_weights_stay_one_parameter(tmp_path: pathlib.Path) -> None:
    x = Input("input", 2)
    w = Weight(Normal((2, 2)))
    net = Network({"a": x @ w, "b": Tanh(x @ w) @ w})
    loaded = round_trip(tmp_path, net)
    assert len(loaded.params) == 1
    header = json.loads(bytes(np.load(tmp_path / "net.npz", allow_pickle=False)["header"]).decode())
    entries = header["networks"][0]["layers"]
    assert sum(e["class"] == "Weight" for e in entries) == 1


@pytest.mark.parametrize("config", ["kaldi-doc-example.config", "tdnnf.config", "lstm.config", "hmm-tdnn.config"])
def test_kaldi_networks_keep_their_objectives(tmp_path: pathlib.Path, config: str) -> None:
    kaldi = read_network(EXAMPLES / config, seed=5)
    loaded = round_trip(tmp_path, kaldi)
    assert isinstance(loaded, Network) and dict(loaded.objectives) == dict(kaldi.objectives)
    same_outputs(kaldi, loaded, frames=12)


def test_the_issue_example_saves_and_loads(tmp_path: pathlib.Path) -> None:
    net = Network(LogSoftmax(Input("input", 4) @ Weight(Normal((4, 3), 0.1))))
    loaded = round_trip(tmp_path, net, "m.npz")
    assert isinstance(loaded, Network)
    same_outputs(net, loaded)
    with np.load(tmp_path / "m.npz", allow_pickle=False) as data:  # an ordinary .npz
        assert data.files == ["header", "arrays/0"]
        header = json.loads(bytes(data["header"]).decode())
    assert header["format"] == "symnet-network" and header["version"] == 2
    assert header["tree"] == {"network": 0} and len(header["networks"]) == 1
    entry = header["networks"][0]
    assert [e["class"] for e in entry["layers"]] == ["Input", "Weight", "Dot", "LogSoftmax"]
    assert entry["layers"][1]["fields"]["init"] == {
        "initializer": "Normal",
        "fields": {"shape": [4, 3], "stddev": 0.1, "mean": 0.0},
    }
    assert entry["outputs"] == [["output", 3]] and entry["params"] == {"weight": 0}
    assert header["arrays"] == [{"shape": [4, 3], "dtype": "<f4"}] and entry["objectives"] == {}


def test_every_layer_class_is_covered(tmp_path: pathlib.Path) -> None:
    """The networks of this file use every concrete layer class symnet registers."""
    seen: set[type] = set()
    nets = list(core_networks().values()) + [component_network(k) for k in sorted(SAMPLES) + sorted(NONSIMPLE_SAMPLES)]
    for net in nets:
        seen.update(type(layer) for _, root in net.structure.outputs for layer in walk([root]))
    abstract = {"Layer", "BinaryLayer", "Elementwise", "Descriptor", "IndexedLayer", "Component", "Recurrence", "Typed"}
    builtin = {name for name in LAYER_CLASSES.names() if ":" not in name and not name.startswith("_")}
    missing = builtin - abstract - {LAYER_CLASSES.name_of(c) for c in seen}
    assert not missing, missing
    assert {"Zeros", "Normal", "Uniform", "Glorot", "Full"} <= set(INITIALIZER_CLASSES.names())


def test_the_same_network_gives_the_same_bytes(tmp_path: pathlib.Path) -> None:
    net = core_networks()["descriptors"]
    symnet.save(tmp_path / "a.npz", net)
    symnet.save(tmp_path / "b.npz", Network(net.outputs, params=net.params, state=net.state))
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()


def test_a_dag_of_two_to_the_sixty_paths_saves_in_milliseconds(tmp_path: pathlib.Path) -> None:
    h: Layer = Input("input", 2)
    for _ in range(60):
        h = h + h
    net = Network(h)
    start = time.perf_counter()
    loaded = round_trip(tmp_path, net)
    assert time.perf_counter() - start < 1.0
    assert (tmp_path / "net.npz").stat().st_size < 10_000  # 61 entries
    assert loaded.structure == net.structure


# ----- components ---------------------------------------------------------------------------------------


def component_network(kind: str) -> Network:
    if kind in NONSIMPLE_SAMPLES:
        options, in_dim, _ = NONSIMPLE_SAMPLES[kind]
    else:
        options = SAMPLES[kind]
        in_dim = COMPONENTS[kind]("c1", options, Ref("x")).input_dim
    component = COMPONENTS[kind]("c1", options, Input("input", in_dim))
    return Network(Node("c1", component), seed=3)


@pytest.mark.parametrize("kind", sorted(SAMPLES) + sorted(NONSIMPLE_SAMPLES))
def test_every_component_type_round_trips(tmp_path: pathlib.Path, kind: str) -> None:
    net = component_network(kind)
    loaded = round_trip(tmp_path, net)
    # every other frame (StatisticsPooling's input-period is 2), inputs wide enough for every context
    reads = bool(Graph(net.outputs).inputs)
    dim = next(layer.dim for layer in walk([net.output]) if isinstance(layer, Input)) if reads else 0
    frames = IndexSet.range(n=2, t=(-16, 26))
    request = ComputationRequest(
        inputs={"input": frames} if reads else {}, outputs={"output": IndexSet.range(n=2, t=range(0, 10, 2))}
    )
    values = {"input": np.random.default_rng(0).standard_normal((len(frames), dim)).astype(np.float32)}
    same_requested_outputs(set_test_mode(net), set_test_mode(loaded), request, values if reads else {})


# ----- random descriptor graphs and recurrences -------------------------------------------------------------


@settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@given(st.data())
def test_random_networks_round_trip_with_equal_outputs(tmp_path: pathlib.Path, data: st.DataObject) -> None:
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    dim = data.draw(st.integers(1, 3), label="dim")
    gen = NetGen(data, rng, dim, x_moves=data.draw(st.booleans(), label="x moves"), recurrent=True, t_range=(0, 6))
    net = draw_network(gen)
    loaded = round_trip(tmp_path, net)
    # every output Index the planner finds computable, on a regular request
    frames = IndexSet.range(n=2, t=(0, 6))
    inputs = {"input": frames} if reads_input(net) else {}
    wanted = IndexSet.range(n=1, t=(-2, 8))
    outputs = {}
    for name in net.outputs:
        planner = Planner(compile_graph(net), ComputationRequest(inputs=inputs, outputs={name: wanted}))
        keys = planner.wanted[name]
        ok = planner.computable(planner.output_ids[name], keys)
        ts = sorted({t for (n, t, x) in IndexSet.of(wanted) if n == 0} & set(_ts(keys[ok])))
        if ts:
            outputs[name] = IndexSet.range(n=2, t=(ts[0], ts[0] + 1))
    if not outputs:
        return
    request = ComputationRequest(inputs=inputs, outputs=outputs)
    values = {"input": rng.standard_normal((len(frames), dim))} if inputs else {}
    want = compile(net, request)(net, values)
    symnet.clear_caches()
    got = compile(loaded, request)(loaded, values)
    for name in outputs:
        np.testing.assert_array_equal(np.asarray(got[name]), np.asarray(want[name]))


def compile_graph(net: Network) -> Any:
    from symnet._src.engine.graph import Graph

    return Graph(net.outputs)


def _ts(keys: np.ndarray) -> list[int]:
    from symnet._src.core.index import decode

    return decode(keys)[1].tolist()


# ----- users' layer classes -----------------------------------------------------------------------------------


@symnet.layer_class
class Gated(Layer):
    """A user's layer: `x * sigmoid(gate)`, with a hyper-parameter of every kind the format holds."""

    arg: Layer = child()
    gate: Layer = child()
    sharpness: float = 1.0
    label: str = "g"
    flags: tuple = ()
    where_to: int | None = None

    def apply(self, x: Any, g: Any) -> Any:  # type: ignore[override]
        return x * jnp.reciprocal(1.0 + jnp.exp(-self.sharpness * g))

    def vjp(self, d: Any, value: Any, x: Any, g: Any) -> tuple[Any, Any]:  # type: ignore[override]
        s = jnp.reciprocal(1.0 + jnp.exp(-self.sharpness * g))
        return d * s, d * x * self.sharpness * s * (1.0 - s)


def test_a_users_layer_class_round_trips(tmp_path: pathlib.Path) -> None:
    x = Input("input", 3)
    net = Network(Gated(x, x @ Weight(Normal((3, 3))), 2.0, "gate", (("a", 1), ("b", (2.5, float("inf")))), 7))
    loaded = round_trip(tmp_path, net)
    layer = loaded.output
    assert isinstance(layer, Gated) and layer.flags == (("a", 1), ("b", (2.5, float("inf"))))
    same_outputs(net, loaded)
    header = json.loads(bytes(np.load(tmp_path / "net.npz")["header"]).decode())
    assert header["networks"][0]["layers"][-1]["class"] == f"{__name__}:Gated"


def test_layers_the_format_cannot_hold_are_save_errors_naming_the_field(tmp_path: pathlib.Path) -> None:
    @attrs.frozen
    class Unregistered(Layer):
        arg: Layer = child()

    x = Input("input", 2)
    with pytest.raises(SaveError, match="not registered"):
        symnet.save(tmp_path / "a.npz", Network(Unregistered(x)))
    with pytest.raises(SaveError, match=r"field 'label'.*frozenset"):
        symnet.save(tmp_path / "b.npz", Network(Gated(x, x, label=frozenset({1}))))
    with pytest.raises(
        SaveError, match=r"tree\['layer'\] is a symnet._src.core.descriptor.Input: symnet.save holds Networks"
    ):
        symnet.save(tmp_path / "c.npz", {"layer": x})
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_redefined_class_replaces_the_old_one_under_its_name() -> None:
    def define() -> type[Layer]:
        @symnet.layer_class
        class Twice(Layer):
            arg: Layer = child()

        return Twice

    first, second = define(), define()
    name = LAYER_CLASSES.name_of(first)
    assert first is not second and name is not None and LAYER_CLASSES.lookup(name) is second


def test_two_symnet_classes_with_one_name_are_refused() -> None:
    from symnet._src.core.registry import ClassRegistry

    registry = ClassRegistry("layer")
    registry.register(Tanh)
    clash = type("Tanh", (), {"__module__": "symnet.elsewhere", "__qualname__": "Tanh"})
    with pytest.raises(symnet.LayerTypeError, match="two layer classes are named 'Tanh'"):
        registry.register(clash)


def test_the_file_is_an_ordinary_zip_of_npy_members(tmp_path: pathlib.Path) -> None:
    net = core_networks()["descriptors"]
    symnet.save(tmp_path / "n.npz", net)
    with zipfile.ZipFile(tmp_path / "n.npz") as z:
        names = z.namelist()
        assert names[0] == "header.npy"
        assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())
    header = json.loads(bytes(np.load(tmp_path / "n.npz", allow_pickle=False)["header"]).decode())
    assert names[1:] == [f"arrays/{k}.npy" for k in range(len(header["arrays"]))]


def test_a_file_naming_the_old_constant_initialiser_loads_it_as_full(tmp_path: pathlib.Path) -> None:
    """`components.Constant` became `symnet.Full`; files written before say "Constant" and still load."""
    net = Network(Input("input", 4) @ Weight(Full((4, 3), 0.5)))
    symnet.save(tmp_path / "new.npz", net)
    with np.load(tmp_path / "new.npz", allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    header = json.loads(bytes(arrays["header"]).decode())
    init = header["networks"][0]["layers"][1]["fields"]["init"]
    assert init["initializer"] == "Full"
    init["initializer"] = "Constant"
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    np.savez(tmp_path / "old.npz", **arrays)
    loaded = symnet.load(tmp_path / "old.npz")
    weight = next(layer for layer in walk(list(loaded.outputs.values())) if isinstance(layer, Weight))
    assert weight.init == Full((4, 3), 0.5)
    same_outputs(net, loaded)
