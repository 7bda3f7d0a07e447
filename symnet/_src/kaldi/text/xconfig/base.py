"""The xconfig layer base class: options with Kaldi's defaults and types, descriptors, names, errors.

Every layer type is a subclass of `XLayer` registered for its xconfig names
with `@layer_types(...)`. A layer is built from an `XconfigLine` and the layers
before it, in Kaldi's order (XconfigLayerBase.__init__):

1. `defaults()`: the options and their default values; the type of each
   default is the type of the option (bool, int, float or str, as in Kaldi:
   an option whose default is `''` is passed through as written).
2. The line's options replace the defaults (an unknown option is an error that
   suggests the closest valid one and lists them all; a Kaldi option symnet
   cannot honour, listed in the class's `unsupported`, is an error that says so).
3. Every descriptor option (`input`, normally `[-1]`, the previous layer) is
   parsed, and its dim and its text in the generated config worked out.
4. `derive()` fills in options that default to values worked out from others
   (by default `dim`, from the input's dim), `check()` checks them.

`lines()` then gives the generated config lines, each with the config files
it goes to (`init`, `ref`, `final`, as xconfig_to_configs.py writes them);
`output_name(aux)` and `output_dim(aux)` are what a later layer's descriptor
sees of this one (`aux`: an auxiliary output such as `c` of `lstm1.c`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

import attrs

from ....base.errors import ConfigError
from ....base.text import clip
from .descriptor import DimMismatch, XDescriptor, parse_xdescriptor
from .syntax import XconfigLine

__all__ = [
    "KALDI_LAYER_TYPES",
    "LAYER_TYPES",
    "UNSUPPORTED_LAYER_TYPES",
    "XLayer",
    "XInput",
    "both",
    "closest",
    "fmt",
    "layer_types",
]

#: xconfig layer type -> the class that implements it.
LAYER_TYPES: dict[str, type[XLayer]] = {}

#: Kaldi's xconfig layer types that symnet refuses, with the reason (none: symnet expands all of them).
UNSUPPORTED_LAYER_TYPES: dict[str, str] = {}

#: Kaldi's xconfig layer types, in the order of its parser.py (`config_to_layer`, Kaldi f4007661).
KALDI_LAYER_TYPES = (
    "input",
    "output",
    "output-layer",
    "relu-layer",
    "relu-renorm-layer",
    "relu-batchnorm-dropout-layer",
    "relu-dropout-layer",
    "relu-batchnorm-layer",
    "relu-batchnorm-so-layer",
    "batchnorm-so-relu-layer",
    "batchnorm-layer",
    "sigmoid-layer",
    "tanh-layer",
    "fixed-affine-layer",
    "idct-layer",
    "affine-layer",
    "lstm-layer",
    "lstmp-layer",
    "lstmp-batchnorm-layer",
    "fast-lstm-layer",
    "fast-lstm-batchnorm-layer",
    "fast-lstmp-layer",
    "fast-lstmp-batchnorm-layer",
    "lstmb-layer",
    "stats-layer",
    "relu-conv-layer",
    "conv-layer",
    "conv-relu-layer",
    "conv-renorm-layer",
    "relu-conv-renorm-layer",
    "batchnorm-conv-layer",
    "conv-relu-renorm-layer",
    "batchnorm-conv-relu-layer",
    "relu-batchnorm-conv-layer",
    "relu-batchnorm-noconv-layer",
    "relu-noconv-layer",
    "conv-relu-batchnorm-layer",
    "conv-relu-batchnorm-so-layer",
    "conv-relu-batchnorm-dropout-layer",
    "conv-relu-dropout-layer",
    "res-block",
    "res2-block",
    "channel-average-layer",
    "attention-renorm-layer",
    "attention-relu-renorm-layer",
    "attention-relu-batchnorm-layer",
    "relu-renorm-attention-layer",
    "gru-layer",
    "pgru-layer",
    "opgru-layer",
    "norm-pgru-layer",
    "norm-opgru-layer",
    "fast-gru-layer",
    "fast-pgru-layer",
    "fast-norm-pgru-layer",
    "fast-opgru-layer",
    "fast-norm-opgru-layer",
    "tdnnf-layer",
    "prefinal-layer",
    "spec-augment-layer",
    "renorm-component",
    "batchnorm-component",
    "no-op-component",
    "linear-component",
    "affine-component",
    "scale-component",
    "dim-range-component",
    "offset-component",
    "combine-feature-maps-layer",
    "delta-layer",
)

_VALID_NAME = re.compile(r"[a-zA-Z_][-a-zA-Z_0-9.]*\Z")

Lines = list[tuple[tuple[str, ...], str]]


def layer_types(*names: str) -> Callable[[type[XLayer]], type[XLayer]]:
    """Register a layer class for the xconfig layer types `names`."""

    def register(cls: type[XLayer]) -> type[XLayer]:
        cls.types = names
        for name in names:
            LAYER_TYPES[name] = cls
        return cls

    return register


def closest(word: str, candidates: Iterable[str]) -> str:
    """'; did you mean X?' for the closest candidates, or ''."""
    close = difflib.get_close_matches(word, sorted(set(candidates)), n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(close)}?" if close else ""


def fmt(value: Any) -> str:
    """A value as Kaldi's Python scripts print it (str(): 1e-05, 0.75, True)."""
    return str(value)


def both(texts: Iterable[str]) -> Lines:
    """Lines that go to ref.config and final.config (most layers' lines)."""
    return [(("ref", "final"), text) for text in texts]


def _convert(key: str, default: Any, text: str) -> Any:
    """Kaldi's convert_value_to_type: the type is the default's."""
    if isinstance(default, bool):
        if text in ("true", "True"):
            return True
        if text in ("false", "False"):
            return False
        raise ValueError("expected true or false")
    if isinstance(default, int):
        try:
            return int(text)
        except ValueError:
            raise ValueError("expected an integer") from None
    if isinstance(default, float):
        try:
            return float(text)
        except ValueError:
            raise ValueError("expected a number") from None
    return text


@attrs.frozen
class Resolved:
    """A descriptor option: the parsed descriptor, its dim and its text in the generated config."""

    descriptor: XDescriptor
    dim: int
    text: str


class XLayer:
    """One xconfig layer (see the module doc). Subclasses override the hooks below."""

    types: ClassVar[tuple[str, ...]] = ()
    #: Options that are descriptors.
    descriptor_keys: ClassVar[tuple[str, ...]] = ("input",)
    #: The auxiliary outputs other layers may refer to (`name.aux`).
    aux: ClassVar[tuple[str, ...]] = ()
    #: Kaldi options of the layer that symnet refuses when a line sets them, with the reason (none at present).
    unsupported: ClassVar[dict[str, str]] = {}
    #: False for output layers: their output-node cannot be an input of another layer (their auxiliary outputs can).
    referable: ClassVar[bool] = True
    #: Options naming files the layer writes (`matrices()`, by the paths these give), as the idct-layer's
    #: affine-transform-file: written only inside the output folder (`symnet._src.kaldi.text.xconfig.files`).
    writes: ClassVar[tuple[str, ...]] = ()

    #: The layer's name (its `name=` option).
    name: str

    def __init__(self, source: XconfigLine, previous: Sequence[XLayer]):
        self.source = source
        self.layer_type = source.type
        name = source.value("name")
        if name is None:
            raise source.error(f"{source.type}: the layer needs a name (name=...)")
        if not _VALID_NAME.match(name):
            raise source.error(f"{source.type}: {name!r} is not a valid layer name", source.value_column("name"))
        if any(layer.name == name and layer.layer_type != "existing" for layer in previous):
            # (Kaldi's rule: a layer may take the name of a node of the existing network, as output-layer output)
            raise source.error(f"the name {name!r} is used for more than one layer", source.value_column("name"))
        self.name = name
        self.previous = list(previous)
        #: The auxiliary outputs later layers referred to (a fast-lstm-layer writes its `c` node only then).
        self.used_aux: set[str] = set()
        self.config: dict[str, Any] = self.defaults()
        for key, text in source.options:
            if key == "name":
                continue
            if key in self.unsupported:
                raise source.error(
                    f"{self.what}: option {key} is not supported by symnet ({self.unsupported[key]})",
                    source.key_column(key),
                )
            if key not in self.config:
                allowed = " ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in self.config.items())
                raise source.error(
                    f"{self.what}: unknown option {key}{closest(key, self.config)} (the options and "
                    f"their defaults: {allowed})",
                    source.key_column(key),
                )
            try:
                self.config[key] = _convert(key, self.config[key], text)
            except ValueError as e:
                raise source.error(f"{self.what}: {key}={clip(text)}: {e}", source.value_column(key)) from None
        self.inputs: dict[str, Resolved] = {key: self._resolve(key) for key in self.descriptor_keys}
        self.derive()
        self.check()

    # ----- what subclasses provide -----------------------------------------------------------

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        raise NotImplementedError

    def derive(self) -> None:
        """Kaldi's default set_derived_configs: a `dim` <= 0 becomes the input's dim."""
        if "dim" in self.config and self.config["dim"] <= 0 and "input" in self.inputs:
            self.config["dim"] = self.inputs["input"].dim

    def check(self) -> None:
        pass

    def auxiliary_outputs(self) -> tuple[str, ...]:
        """The auxiliary outputs a later layer may refer to (`name.aux`): `aux`, unless the options decide."""
        return self.aux

    def output_name(self, aux: str | None = None) -> str:
        raise NotImplementedError

    def output_dim(self, aux: str | None = None) -> int:
        raise NotImplementedError

    def lines(self) -> Lines:
        raise NotImplementedError

    def matrices(self) -> dict[str, Any]:
        """Files the layer writes (the path an option in `writes` gives -> numpy array), as the idct-layer writes
        its matrix."""
        return {}

    # ----- helpers ------------------------------------------------------------------------------

    @property
    def what(self) -> str:
        return f"{self.layer_type} {clip(self.name, 80)}"

    def error(self, message: str, key: str | None = None) -> ConfigError:
        """A ConfigError at this layer's line, pointing at option `key` when it was written there."""
        column = self.source.value_column(key) if key else None
        return self.source.error(f"{self.what}: {message}", column or self.source.value_column("name"))

    def require(self, condition: bool, message: str, key: str | None = None) -> None:
        if not condition:
            raise self.error(message, key)

    @property
    def input(self) -> Resolved:
        return self.inputs["input"]

    def describe(self, normalized: bool = False) -> str:
        """The layer as xconfig_to_configs.py writes it to xconfig.expanded.1 (every option, sorted) or, with
        `normalized`, to xconfig.expanded.2 (descriptors with the shorthands expanded)."""
        config = dict(self.config)
        if normalized:
            config.update({key: str(resolved.descriptor) for key, resolved in self.inputs.items()})
        words = [f"{self.layer_type} name={self.name}"]
        for key in sorted(config):
            value = config[key]
            text = fmt(value)
            words.append(f'{key}="{text}"' if isinstance(value, str) and "=" in text else f"{key}={text}")
        return " ".join(words)

    def _resolve(self, key: str) -> Resolved:
        text = str(self.config[key])
        column = self.source.value_column(key) if self.source.value(key) is not None else None

        def fail(message: str, position: int) -> ConfigError:
            where = column + position if column else None
            return self.source.error(f"{self.what}: {key}={clip(text)}: {message}", where or self.source.type_column)

        # [-1], [-2] and bare offsets count the xconfig's layers only, not the existing network's nodes (Kaldi's rule)
        layers = [layer.name for layer in self.previous if layer.layer_type != "existing"]
        descriptor = parse_xdescriptor(text, layers, fail=fail)

        def lookup(name: str) -> tuple[XLayer, str | None]:
            return self._lookup(name, lambda message: fail(message, max(text.find(name.split(".")[0]), 0)))

        try:
            dim = descriptor.dim(lambda name: lookup(name)[0].output_dim(lookup(name)[1]))
        except DimMismatch as e:
            raise fail(str(e), 0) from None
        final = descriptor.config_text(lambda name: lookup(name)[0].output_name(lookup(name)[1]))
        return Resolved(descriptor, dim, final)

    def _lookup(self, full: str, fail: Callable[[str], ConfigError]) -> tuple[XLayer, str | None]:
        """Kaldi's rule: the first earlier layer named `full`, or named `a` for `a.aux` with that auxiliary output."""
        head, _, aux = full.partition(".")
        for layer in self.previous:
            if layer.name in (full, head):
                if not layer.referable and layer.name == full:
                    raise fail(f"{layer.layer_type} {layer.name} is an output; other layers cannot use it")
                if layer.name == full:
                    return layer, None
                known = layer.auxiliary_outputs()
                if aux not in known:
                    hint = f" (it has {', '.join(known)})" if known else ""
                    raise fail(f"layer {head} ({layer.layer_type}) has no auxiliary output {aux!r}{hint}")
                layer.used_aux.add(aux)
                return layer, aux
        raise fail(f"no layer named {head!r} before this line{closest(head, [layer.name for layer in self.previous])}")


class XInput(XLayer):
    """An input (`input name=ivector dim=100`), or an existing node of a base network (type `existing`)."""

    descriptor_keys = ()

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {"dim": -1}

    def check(self) -> None:
        self.require(self.config["dim"] > 0, f"dim must be positive, got {self.config['dim']}", "dim")

    def output_name(self, aux: str | None = None) -> str:
        return self.name

    def output_dim(self, aux: str | None = None) -> int:
        return self.config["dim"]

    def lines(self) -> Lines:
        if self.layer_type == "existing":
            return []
        return [(("init", "ref", "final"), f"input-node name={self.name} dim={self.config['dim']}")]


LAYER_TYPES["input"] = XInput
XInput.types = ("input",)
