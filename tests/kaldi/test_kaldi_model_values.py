"""Reading a model file builds the Network from the stored values: no initialiser drawn, no program compiled.

The reference is the file itself (every stored parameter token, by its Weight
name `{component}.{field}`) and the network the config builder makes from the
same lines (its initial values then overwritten, as reading did before): the
same structure, the same Weight names in the same order, the stored values.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterator

import jax
import jax.monitoring
import numpy as np
import pytest

from helpers.kaldi_corpus import case_folder
from helpers.kaldi_models import AM_TEXT, NNET_TEXT
from helpers.kaldi_oracle import case_names
from symnet import Network, Weight
from symnet._src.kaldi.models.model_reader import component_line, model_from_nnet, parse_model
from symnet._src.kaldi.models.nnet_file import NnetFile, parse_nnet, read_nnet, token_to_field
from symnet._src.kaldi.text.build import build_network
from symnet._src.kaldi.text.config import ComponentLine, ComponentNode, parse_config
from symnet.errors import ModelFormatError, ParameterError

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
#: The hand-written models and every case of the corpus; the hand and xconfig cases and every 8th generated one.
EVERY = ["nnet", "am", *(c for source in ("hand", "xconfig", "kaldi-gen") for c in case_names(source))]
MODELS = ["nnet", "am", *case_names("hand"), *case_names("xconfig"), *case_names("kaldi-gen")[::8]]


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    """Generated configs leave nodes unused, which symnet warns about (as Kaldi logs it)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is not used by any.*", category=UserWarning)
        yield


@functools.cache
def _nnet(model: str) -> NnetFile:
    if model == "nnet":
        return parse_nnet(NNET_TEXT.encode())
    if model == "am":
        return parse_nnet(AM_TEXT.encode())
    return read_nnet(case_folder(model) / "model.txt")


@pytest.fixture
def compiled(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every initialiser raises; the list of programs XLA compiles while the test runs."""

    def refuse(self: Weight, key: jax.Array) -> jax.Array:
        raise AssertionError(f"the initialiser of {self.name} was drawn")

    monkeypatch.setattr(Weight, "initial_value", refuse)
    programs: list[str] = []

    def listener(event: str, duration_secs: float, **kwargs: object) -> None:
        if event == BACKEND_COMPILE:
            programs.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    yield programs
    jax.monitoring.unregister_event_duration_listener(listener)


@pytest.mark.parametrize("model", EVERY)
def test_reading_a_model_draws_no_initialiser_and_compiles_nothing(model: str, compiled: list[str]) -> None:
    read = model_from_nnet(_nnet(model))
    assert compiled == []
    if model in ("nnet", "am"):
        assert read.network.values  # it has parameters, all from the file


def test_the_initialiser_guard_catches_a_drawn_initialiser(compiled: list[str]) -> None:
    from symnet import Input, Normal

    with pytest.raises(AssertionError, match="initialiser of w"):
        Network(Input("input", 2) @ Weight(Normal((2, 2), 1.0), "w"))


@pytest.mark.parametrize("model", MODELS)
def test_reading_a_model_gives_the_stored_values_and_the_config_builders_structure(model: str) -> None:
    nnet = _nnet(model)
    network = model_from_nnet(nnet).network
    lines = [component_line(c) for c in nnet.components] + parse_config(nnet.config)
    used = {line.component for line in lines if isinstance(line, ComponentNode)}
    lines = [line for line in lines if not isinstance(line, ComponentLine) or line.name in used]
    built = build_network(lines)  # initial values drawn
    assert network.structure == built.structure
    assert list(network.params) == list(built.params) and list(network.state) == list(built.state)
    covered: set[str] = set()
    for c in nnet.components:
        if c.type == "CompositeComponent":
            covered.update(n for n in network.values if n.startswith(f"{c.name}."))
            continue
        for token, stored in c.fields:
            name = f"{c.name}.{token_to_field(token)}"
            if name in network.values:
                value = network.values[name]
                assert isinstance(value, jax.Array) and value.dtype == np.float32
                np.testing.assert_array_equal(np.asarray(value), np.asarray(stored, dtype=np.float32))
                covered.add(name)
    assert covered == set(network.values)


def test_a_network_takes_values_for_some_weights_and_draws_only_the_others() -> None:
    from symnet import Input, Normal

    x = Input("input", 3)
    a, b = Weight(Normal((3, 4), 1.0), "a"), Weight(Normal((4, 2), 1.0), "b")
    fresh = Network(x @ a @ b, seed=3)
    given = np.arange(12, dtype=np.float32).reshape(3, 4)
    net = Network(x @ a @ b, seed=3, values={"a": given})
    np.testing.assert_array_equal(np.asarray(net.params["a"]), given)
    np.testing.assert_array_equal(np.asarray(net.params["b"]), np.asarray(fresh.params["b"]))
    assert net.structure == fresh.structure
    with pytest.raises(ParameterError, match="unknown Weight"):
        Network(x @ a @ b, values={"c": given})
    with pytest.raises(ParameterError, match="shape"):
        Network(x @ a @ b, values={"a": given.T})
    with pytest.raises(ParameterError, match="not both"):
        Network(x @ a @ b, values={"a": given}, params=fresh.params)


def test_a_stored_shape_that_disagrees_is_still_named() -> None:
    text = NNET_TEXT.replace("<BiasParams>  [ 0.1 0.2 -0.3 0.4 ]", "<BiasParams>  [ 0.1 0.2 -0.3 ]", 1)
    assert text != NNET_TEXT
    with pytest.raises(ModelFormatError, match=r"affine1.*BiasParams.*\(3,\)"):
        parse_model(text.encode())
