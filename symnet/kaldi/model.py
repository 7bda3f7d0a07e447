"""Kaldi nnet3 model files as symnet networks, and back: `read_model` / `write_model`.

    model = read_model("final.mdl")          # text or binary; raw nnet (nnet3-init) or acoustic model
    model.network                            # a KaldiNetwork (Network + objectives), parameters from the file
    model.priors                             # AmNnetSimple's priors (None for a raw nnet)
    write_model("copy.mdl", model)           # byte-identical to final.mdl when nothing changed
    write_model("net.raw", parse_network(config), binary=False)   # a network built in symnet

Reading (`model_from_nnet` on the token-level `NnetFile` of `symnet.kaldi.model_io`):
every component the file's node lines use becomes a `component` config line
whose options are derived from its fields, per Kaldi type: dims from the
parameter shapes or the `<Dim>`/`<InputDim>` tokens, hyper-parameters
(`<BlockDim>`, `<TargetRms>`, `<Epsilon>`, `<TimeOffsets>`,
`<DropoutProportion>`, the cell dim of an LSTM from its `<Params>`, ...) and the
metadata the config builder keeps (learning rates, max-change, natural-gradient
ranks). The network is then built by the config builder
(`symnet.kaldi.network.build_network`) from those lines plus the file's node
lines, and every parameter (`{component}.{token_to_field(token)}`, e.g.
`affine1.linear_params`) is set from the file, shape-checked. A stored shape
that disagrees with the node lines is a `ModelFormatError` naming the
component and the token.

Floats the file stores as float32 become options by their shortest decimal
(`0.001`, not `0.0010000000474974513`), so a config option survives the round
trip config -> model file -> network exactly.

Writing (`model_to_nnet`, `format_model`, `write_model`): a model read from a
file keeps that file (`KaldiModel.source`); every token symnet does not model
(statistics such as `<ValueAvg>`, `<Count>`, `<OderivRms>`, self-repair
counters, legacy tokens) is written back as it was, and a parameter whose
value did not change keeps its stored bits (also float64 ones, such as
BatchNorm's `<Count>`). So a model read and written with no change is
byte-identical in the format it was read in; written in the other format it is
what `nnet3-copy --binary=...` gives. A component that is not the one read
(a network built in symnet, or a component replaced) is synthesised in Kaldi's
write order, with empty statistics, for the types in `WRITABLE_TYPES`; other
types raise `ModelWriteError`. Reading what was written gives an equal
network (`==` on `network.structure`, equal `params`) as long as the
components' Weights have the initialisers their options give by default:
Kaldi files store values, not initialisers (`param-stddev=0` comes back as the
default initialiser, with the stored zeros as its value).

Acoustic models (`nnet3-am-init`, `final.mdl`): the transition model is kept
as read (`KaldiModel.transition_model`; its raw bytes for a byte-identical
rewrite); `<LeftContext>`/`<RightContext>` are the file's while the network's
structure is unchanged, else the network's context; `<Priors>` are
`KaldiModel.priors`. `write_model(..., raw=True)` writes only the nnet
(`nnet3-am-copy --raw=true`).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping

import attrs
import jax.numpy as jnp
import numpy as np

from ..components import COMPONENTS
from ..components.base import Component
from ..core.descriptor import DimRange, Input, Node, Ref
from ..errors import ConfigError, DescriptorError, ModelFormatError, ParameterError, SymnetError
from ..core.layer import Identity, Weight
from ..core.walk import walk
from ..network import Network
from .config import (
    ComponentLine,
    ComponentNode,
    ConfigLine,
    DimRangeNode,
    InputNode,
    OutputNode,
    parse_config,
    write_config,
)
from .descriptor_text import write_descriptor
from .model_io import NnetComponent, NnetFile, TransitionModel, format_nnet, parse_nnet, token_to_field, write_nnet
from .network import KaldiNetwork, _PLACEHOLDER, _by_name, _descriptor_dim, _write_order, build_network

__all__ = [
    "READABLE_TYPES",
    "WRITABLE_TYPES",
    "KaldiModel",
    "ModelWriteError",
    "component_line",
    "format_model",
    "is_kaldi_model",
    "model_from_nnet",
    "model_to_nnet",
    "nnet_component",
    "output_dims",
    "parse_model",
    "read_model",
    "write_model",
]


class ModelWriteError(SymnetError, ValueError):
    """A network that cannot be written as a Kaldi model file (a component type symnet cannot write,
    a node that is not a component or a dim range, priors without a transition model)."""


# ----- the model ------------------------------------------------------------------------------


def _as_kaldi_network(value: Any) -> KaldiNetwork:
    if isinstance(value, KaldiNetwork):
        return value
    if isinstance(value, Network):
        return KaldiNetwork(value)
    raise TypeError(f"KaldiModel.network must be a KaldiNetwork or a Network, not {type(value).__name__}")


def _as_priors(value: Any) -> np.ndarray | None:
    if value is None:
        return None
    array = np.array(value, dtype=np.float32)
    if array.ndim != 1:
        raise ModelFormatError(f"priors must be a vector, got shape {array.shape}")
    array.setflags(write=False)
    return array


@attrs.frozen(eq=False)
class KaldiModel:
    """A Kaldi nnet3 model as symnet holds it.

    `network` is the KaldiNetwork (train it, run it, replace its parameters);
    `priors` AmNnetSimple's priors (None for a raw nnet); `transition_model` an
    acoustic model's transition model (None for a raw nnet). `source` is the
    `NnetFile` the model was read from (None for a network built in symnet):
    writing takes from it everything symnet does not model, so an unchanged
    model is written back byte for byte. `reference` is the network structure
    built from `source` (to tell what changed since).
    """

    network: KaldiNetwork = attrs.field(converter=_as_kaldi_network)
    priors: np.ndarray | None = attrs.field(default=None, converter=_as_priors)
    transition_model: TransitionModel | None = None
    source: NnetFile | None = attrs.field(default=None, repr=False)
    reference: Any = attrs.field(default=None, repr=False)

    @property
    def is_am(self) -> bool:
        """Whether this is an acoustic model (a transition model and priors with the nnet)."""
        return self.transition_model is not None

    @property
    def params(self) -> dict[str, Any]:
        return self.network.params

    def replace(self, *, network: Network | KaldiNetwork | None = None, params: Mapping[str, Any] | None = None,
                priors: Any = attrs.NOTHING) -> KaldiModel:
        """A copy with another network, new parameters or other priors (the file it came from stays)."""
        net = self.network
        if network is not None:
            net = KaldiNetwork(network, net.objectives) if isinstance(network, Network) else network
        if params is not None:
            net = net.replace(params=params)
        changes: dict[str, Any] = {"network": net}
        if priors is not attrs.NOTHING:
            changes["priors"] = priors
        return attrs.evolve(self, **changes)

    def to_nnet(self, *, raw: bool = False) -> NnetFile:
        """The model as a token-level `NnetFile` (see `model_to_nnet`)."""
        return model_to_nnet(self, raw=raw)


def _model(value: Any) -> KaldiModel:
    if isinstance(value, KaldiModel):
        return value
    if isinstance(value, (KaldiNetwork, Network)):
        return KaldiModel(value)
    raise TypeError(f"expected a KaldiModel, KaldiNetwork or Network, got {type(value).__name__}")


# ----- floats between files and options -------------------------------------------------------


def _float(value: Any) -> float:
    """A stored number as a config option: float32 by its shortest decimal, so 0.001 stays 0.001."""
    if isinstance(value, np.float32):
        return float(str(value))
    return float(value)


def _option_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    if isinstance(value, (tuple, list)):
        return ",".join(_option_text(v) for v in value)
    return str(value)


# ----- reading: fields -> config options -------------------------------------------------------

_REQUIRED = object()


class _Fields:
    """Typed access to a component's fields; errors name the file, component and token."""

    def __init__(self, component: NnetComponent, file: str):
        self.c = component
        self.file = file
        #: Where the component's dims come from, for error messages: "input"/"output" -> text.
        self.origin: dict[str, str] = {}

    def error(self, message: str, token: str | None = None) -> ModelFormatError:
        where = f" <{token}>" if token else ""
        return ModelFormatError(f"{self.file}: component {self.c.name!r} ({self.c.type}){where}: {message}")

    def has(self, token: str) -> bool:
        return token in self.c

    def _get(self, token: str, default: Any) -> Any:
        if token in self.c:
            return self.c[token]
        if default is _REQUIRED:
            raise self.error(f"missing: a {self.c.type} needs <{token}>", token)
        return default

    def int(self, token: str, default: Any = _REQUIRED) -> Any:
        value = self._get(token, default)
        if token in self.c and (isinstance(value, bool) or not isinstance(value, (int, np.integer))):
            raise self.error(f"expected an integer, got {value!r}", token)
        return value

    def float(self, token: str, default: Any = _REQUIRED) -> Any:
        value = self._get(token, default)
        if token not in self.c:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise self.error(f"expected a number, got {value!r}", token)
        return _float(value)

    def bool(self, token: str, default: Any = _REQUIRED) -> Any:
        value = self._get(token, default)
        if token in self.c and not isinstance(value, (bool, np.bool_)):
            raise self.error(f"expected T or F, got {value!r}", token)
        return bool(value)

    def pair(self, token: str, default: Any = _REQUIRED) -> Any:
        value = self._get(token, default)
        if token in self.c and not (isinstance(value, tuple) and len(value) == 2):
            raise self.error(f"expected two values, got {value!r}", token)
        return value

    def array(self, token: str, ndim: int, default: Any = _REQUIRED) -> Any:
        value = self._get(token, default)
        if token not in self.c:
            return value
        kind = "vector" if ndim == 1 else "matrix"
        if not isinstance(value, np.ndarray) or value.dtype.kind != "f" or value.ndim != ndim:
            raise self.error(f"expected a {kind}, got {_describe(value)}", token)
        return value

    def ints(self, token: str) -> tuple[int, ...]:
        value = self._get(token, _REQUIRED)
        if not isinstance(value, np.ndarray) or value.dtype.kind not in "iu" or value.ndim != 1:
            raise self.error(f"expected an integer vector, got {_describe(value)}", token)
        return tuple(int(v) for v in value)

    def dims_from(self, which: str, token: str, text: str) -> None:
        self.origin[which] = f"<{token}> {text}"


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape} ({value.dtype})"
    if isinstance(value, NnetComponent):
        return f"a nested {value.type}"
    return repr(value)


def _updatable_options(f: _Fields) -> dict[str, Any]:
    out = {"learning-rate": f.float("LearningRate", 0.001)}
    for token, key in (("LearningRateFactor", "learning-rate-factor"), ("MaxChange", "max-change"),
                       ("L2Regularize", "l2-regularize")):
        if f.has(token):
            out[key] = f.float(token)
    return out


def _matrix_dims(f: _Fields, token: str, *, in_scale: int = 1, out_scale: int = 1) -> tuple[int, int]:
    m = f.array(token, 2)
    rows, cols = m.shape
    f.dims_from("input", token, f"has {cols} columns" + (f" (x {in_scale})" if in_scale != 1 else ""))
    f.dims_from("output", token, f"has {rows} rows" + (f" (x {out_scale})" if out_scale != 1 else ""))
    if rows == 0 or cols == 0:
        raise f.error(f"an empty matrix (shape {m.shape})", token)
    return cols * in_scale, rows * out_scale


def _vector_dim(f: _Fields, token: str) -> int:
    v = f.array(token, 1)
    f.dims_from("input", token, f"has {len(v)} elements")
    f.dims_from("output", token, f"has {len(v)} elements")
    if len(v) == 0:
        raise f.error("an empty vector", token)
    return len(v)


def _dim_token(f: _Fields, token: str = "Dim") -> int:
    dim = f.int(token)
    f.dims_from("input", token, f"is {dim}")
    f.dims_from("output", token, f"is {dim}")
    return dim


def _affine_options(f: _Fields) -> dict[str, Any]:
    input_dim, output_dim = _matrix_dims(f, "LinearParams")
    out = {"input-dim": input_dim, "output-dim": output_dim, **_updatable_options(f)}
    if f.has("OrthonormalConstraint"):
        out["orthonormal-constraint"] = f.float("OrthonormalConstraint")
    if f.c.type == "NaturalGradientAffineComponent":
        for token, key, read in (("RankIn", "rank-in", f.int), ("RankOut", "rank-out", f.int),
                                 ("UpdatePeriod", "update-period", f.int),
                                 ("NumSamplesHistory", "num-samples-history", f.float), ("Alpha", "alpha", f.float)):
            if f.has(token):
                out[key] = read(token)
    return out


def _linear_options(f: _Fields) -> dict[str, Any]:
    input_dim, output_dim = _matrix_dims(f, "Params")
    out = {"input-dim": input_dim, "output-dim": output_dim, **_updatable_options(f)}
    if f.has("OrthonormalConstraint"):
        out["orthonormal-constraint"] = f.float("OrthonormalConstraint")
    if f.has("UseNaturalGradient"):
        out["use-natural-gradient"] = f.bool("UseNaturalGradient")
    if f.has("RankInOut"):
        out["rank-in"], out["rank-out"] = f.pair("RankInOut")
    for token, key, read in (("Alpha", "alpha", f.float), ("NumSamplesHistory", "num-samples-history", f.float),
                             ("UpdatePeriod", "update-period", f.int)):
        if f.has(token):
            out[key] = read(token)
    return out


def _fixed_affine_options(f: _Fields) -> dict[str, Any]:
    input_dim, output_dim = _matrix_dims(f, "LinearParams")
    return {"input-dim": input_dim, "output-dim": output_dim}


def _tdnn_options(f: _Fields) -> dict[str, Any]:
    offsets = f.ints("TimeOffsets")
    if not offsets:
        raise f.error("no time offsets", "TimeOffsets")
    m = f.array("LinearParams", 2)
    if m.shape[1] % len(offsets) or m.shape[0] == 0 or m.shape[1] == 0:
        raise f.error(f"shape {m.shape} does not fit {len(offsets)} time offsets (its columns must be a multiple)",
                      "LinearParams")
    f.dims_from("input", "LinearParams", f"has {m.shape[1]} columns for {len(offsets)} time offsets")
    f.dims_from("output", "LinearParams", f"has {m.shape[0]} rows")
    bias = f.array("BiasParams", 1)
    out = {"time-offsets": offsets, "input-dim": m.shape[1] // len(offsets), "output-dim": m.shape[0],
           "use-bias": len(bias) > 0, **_updatable_options(f)}
    if f.has("OrthonormalConstraint"):
        out["orthonormal-constraint"] = f.float("OrthonormalConstraint")
    if f.has("UseNaturalGradient"):
        out["use-natural-gradient"] = f.bool("UseNaturalGradient")
    if f.has("NumSamplesHistory"):
        out["num-samples-history"] = f.float("NumSamplesHistory")
    if f.has("AlphaInOut"):
        out["alpha-in"], out["alpha-out"] = (_float(v) for v in f.pair("AlphaInOut"))
    if f.has("RankInOut"):
        out["rank-in"], out["rank-out"] = f.pair("RankInOut")
    return out


def _nonlinear_options(f: _Fields) -> dict[str, Any]:
    out = {"dim": _dim_token(f)}
    for token, key, read in (("BlockDim", "block-dim", f.int),
                             ("SelfRepairLowerThreshold", "self-repair-lower-threshold", f.float),
                             ("SelfRepairUpperThreshold", "self-repair-upper-threshold", f.float),
                             ("SelfRepairScale", "self-repair-scale", f.float)):
        if f.has(token):
            out[key] = read(token)
    return out


def _normalize_options(f: _Fields) -> dict[str, Any]:
    out = {"input-dim": _dim_token(f, "InputDim" if f.has("InputDim") else "Dim")}
    if f.has("BlockDim"):
        out["block-dim"] = f.int("BlockDim")
    out["target-rms"] = f.float("TargetRms", 1.0)
    out["add-log-stddev"] = f.bool("AddLogStddev", False)
    return out


def _batchnorm_options(f: _Fields) -> dict[str, Any]:
    return {"dim": _dim_token(f), "block-dim": f.int("BlockDim"), "epsilon": f.float("Epsilon"),
            "target-rms": f.float("TargetRms"), "test-mode": f.bool("TestMode", False)}


def _dropout_options(f: _Fields) -> dict[str, Any]:
    return {"dim": _dim_token(f), "dropout-proportion": f.float("DropoutProportion"),
            "dropout-per-frame": f.bool("DropoutPerFrame", False), "test-mode": f.bool("TestMode", False)}


def _general_dropout_options(f: _Fields) -> dict[str, Any]:
    out = {"dim": _dim_token(f), "block-dim": f.int("BlockDim"), "time-period": f.int("TimePeriod", 0),
           "dropout-proportion": f.float("DropoutProportion"), "continuous": f.has("Continuous"),
           "test-mode": f.has("TestMode")}
    return out


def _noop_options(f: _Fields) -> dict[str, Any]:
    return {"dim": _dim_token(f), "backprop-scale": f.float("BackpropScale", 1.0)}


def _lstm_options(f: _Fields) -> dict[str, Any]:
    params = f.array("Params", 2)
    if params.shape[0] != 3 or params.shape[1] == 0:
        raise f.error(f"expected 3 rows (w_ic, w_fc, w_oc) of cell-dim columns, got shape {params.shape}", "Params")
    cell_dim = params.shape[1]
    use_dropout = f.bool("UseDropout", False)
    f.dims_from("input", "Params", f"has {cell_dim} columns (input dim 5 x cell-dim"
                + (" + 3)" if use_dropout else ")"))
    f.dims_from("output", "Params", f"has {cell_dim} columns (output dim 2 x cell-dim)")
    out = {"cell-dim": cell_dim, "use-dropout": use_dropout, **_updatable_options(f)}
    config = f.array("SelfRepairConfig", 1, None)
    if config is not None and len(config) == 10:
        out["sigmoid-self-repair-threshold"] = _float(config[0])
        out["tanh-self-repair-threshold"] = _float(config[2])
        out["self-repair-scale"] = _float(config[5])
    return out


def _gru_options(f: _Fields) -> dict[str, Any]:
    out = {"cell-dim": _dim_token(f, "CellDim"), "recurrent-dim": f.int("RecurrentDim"), **_updatable_options(f)}
    f.origin["input"] = "<CellDim> and <RecurrentDim>"
    for token, key in (("SelfRepairThreshold", "self-repair-threshold"), ("SelfRepairScale", "self-repair-scale"),
                       ("Alpha", "alpha")):
        if f.has(token):
            out[key] = f.float(token)
    if f.has("RankInOut"):
        out["rank-in"], out["rank-out"] = f.pair("RankInOut")
    if f.has("UpdatePeriod"):
        out["update-period"] = f.int("UpdatePeriod")
    return out


def _output_gru_options(f: _Fields) -> dict[str, Any]:
    out = {"cell-dim": _dim_token(f, "CellDim"), **_updatable_options(f)}
    for token, key in (("SelfRepairThreshold", "self-repair-threshold"), ("SelfRepairScale", "self-repair-scale"),
                       ("Alpha", "alpha")):
        if f.has(token):
            out[key] = f.float(token)
    for token, key in (("Rank", "rank"), ("UpdatePeriod", "update-period")):
        if f.has(token):
            out[key] = f.int(token)
    return out


def _scale_offset_options(f: _Fields) -> dict[str, Any]:
    scales = f.array("Scales", 1)
    out = {"dim": _dim_token(f), "block-dim": len(scales), **_updatable_options(f)}
    if f.has("UseNaturalGradient"):
        out["use-natural-gradient"] = f.bool("UseNaturalGradient")
    if f.has("Rank"):
        out["rank"] = f.int("Rank")
    return out


def _per_element_scale_options(f: _Fields) -> dict[str, Any]:
    out = {"dim": _vector_dim(f, "Params"), **_updatable_options(f)}
    if f.c.type == "NaturalGradientPerElementScaleComponent":
        for token, key, read in (("Rank", "rank", f.int), ("UpdatePeriod", "update-period", f.int),
                                 ("NumSamplesHistory", "num-samples-history", f.float), ("Alpha", "alpha", f.float)):
            if f.has(token):
                out[key] = read(token)
    return out


def _per_element_offset_options(f: _Fields) -> dict[str, Any]:
    offsets = f.array("Offsets", 1)
    dim = _dim_token(f) if f.has("Dim") else _vector_dim(f, "Offsets")
    out = {"dim": dim, "block-dim": len(offsets), **_updatable_options(f)}
    if f.has("UseNaturalGradient"):
        out["use-natural-gradient"] = f.bool("UseNaturalGradient")
    return out


def _constant_function_options(f: _Fields) -> dict[str, Any]:
    output = f.array("Output", 1)
    f.dims_from("output", "Output", f"has {len(output)} elements")
    input_dim = f.int("InputDim")
    f.dims_from("input", "InputDim", f"is {input_dim}")
    out = {"input-dim": input_dim, "output-dim": len(output), "is-updatable": f.bool("IsUpdatable", True),
           **_updatable_options(f)}
    if f.has("UseNaturalGradient"):
        out["use-natural-gradient"] = f.bool("UseNaturalGradient")
    return out


def _in_out_options(f: _Fields) -> dict[str, Any]:
    input_dim, output_dim = f.int("InputDim"), f.int("OutputDim")
    f.dims_from("input", "InputDim", f"is {input_dim}")
    f.dims_from("output", "OutputDim", f"is {output_dim}")
    out = {"input-dim": input_dim, "output-dim": output_dim}
    if f.c.type == "SumBlockComponent":
        out["scale"] = f.float("Scale", 1.0)
    return out


def _sum_group_options(f: _Fields) -> dict[str, Any]:
    sizes = f.ints("Sizes")
    f.dims_from("input", "Sizes", f"sum to {sum(sizes)}")
    f.dims_from("output", "Sizes", f"has {len(sizes)} groups")
    return {"sizes": sizes}


def _permute_options(f: _Fields) -> dict[str, Any]:
    column_map = f.ints("ColumnMap")
    f.dims_from("input", "ColumnMap", f"has {len(column_map)} columns")
    f.dims_from("output", "ColumnMap", f"has {len(column_map)} columns")
    return {"column-map": column_map}


def _clip_gradient_options(f: _Fields) -> dict[str, Any]:
    return {"dim": _dim_token(f), "clipping-threshold": f.float("ClippingThreshold"),
            "norm-based-clipping": f.bool("NormBasedClipping"),
            "self-repair-clipped-proportion-threshold": f.float("SelfRepairClippedProportionThreshold", 0.01),
            "self-repair-target": f.float("SelfRepairTarget", 0.0),
            "self-repair-scale": f.float("SelfRepairScale", 1.0)}


def _backprop_truncation_options(f: _Fields) -> dict[str, Any]:
    return {"dim": _dim_token(f), "scale": f.float("Scale", 1.0), "clipping-threshold": f.float("ClippingThreshold"),
            "zeroing-threshold": f.float("ZeroingThreshold"), "zeroing-interval": f.int("ZeroingInterval"),
            "recurrence-interval": f.int("RecurrenceInterval")}


def _block_affine_options(f: _Fields) -> dict[str, Any]:
    num_blocks = f.int("NumBlocks")
    if num_blocks <= 0:
        raise f.error(f"must be positive, got {num_blocks}", "NumBlocks")
    input_dim, output_dim = _matrix_dims(f, "LinearParams", in_scale=num_blocks)
    return {"input-dim": input_dim, "output-dim": output_dim, "num-blocks": num_blocks, **_updatable_options(f)}


def _repeated_affine_options(f: _Fields) -> dict[str, Any]:
    num_repeats = f.int("NumRepeats")
    if num_repeats <= 0:
        raise f.error(f"must be positive, got {num_repeats}", "NumRepeats")
    input_dim, output_dim = _matrix_dims(f, "LinearParams", in_scale=num_repeats, out_scale=num_repeats)
    return {"input-dim": input_dim, "output-dim": output_dim, "num-repeats": num_repeats, **_updatable_options(f)}


def _stats_extraction_options(f: _Fields) -> dict[str, Any]:
    return {"input-dim": _dim_token(f, "InputDim"), "input-period": f.int("InputPeriod", 1),
            "output-period": f.int("OutputPeriod", 1), "include-variance": f.bool("IncludeVarinance", True)}


def _stats_pooling_options(f: _Fields) -> dict[str, Any]:
    return {"input-dim": _dim_token(f, "InputDim"), "input-period": f.int("InputPeriod", 1),
            "left-context": f.int("LeftContext"), "right-context": f.int("RightContext"),
            "num-log-count-features": f.int("NumLogCountFeatures", 0),
            "output-stddevs": f.bool("OutputStddevs", False), "variance-floor": f.float("VarianceFloor", 1.0e-10)}


def _maxpooling_options(f: _Fields) -> dict[str, Any]:
    out = {}
    for a in "xyz":
        out[f"input-{a}-dim"] = f.int(f"Input{a.upper()}Dim")
        out[f"pool-{a}-size"] = f.int(f"Pool{a.upper()}Size")
        out[f"pool-{a}-step"] = f.int(f"Pool{a.upper()}Step")
    f.origin["input"] = "<InputXDim> x <InputYDim> x <InputZDim>"
    return out


def _spec_augment_options(f: _Fields) -> dict[str, Any]:
    return {"dim": _dim_token(f), "zeroed-proportion": f.float("ZeroedProportion"),
            "time-mask-max-frames": f.int("TimeMaskMaxFrames")}


_NONLINEAR_TYPES = ("RectifiedLinearComponent", "SigmoidComponent", "TanhComponent", "SoftmaxComponent",
                    "LogSoftmaxComponent")

#: Kaldi type -> the config options of a component from its fields.
_READERS: dict[str, Callable[[_Fields], dict[str, Any]]] = {
    "AffineComponent": _affine_options,
    "NaturalGradientAffineComponent": _affine_options,
    "LinearComponent": _linear_options,
    "FixedAffineComponent": _fixed_affine_options,
    "TdnnComponent": _tdnn_options,
    **{t: _nonlinear_options for t in _NONLINEAR_TYPES},
    "NormalizeComponent": _normalize_options,
    "BatchNormComponent": _batchnorm_options,
    "DropoutComponent": _dropout_options,
    "GeneralDropoutComponent": _general_dropout_options,
    "NoOpComponent": _noop_options,
    "LstmNonlinearityComponent": _lstm_options,
    "GruNonlinearityComponent": _gru_options,
    "OutputGruNonlinearityComponent": _output_gru_options,
    "ScaleAndOffsetComponent": _scale_offset_options,
    "PerElementScaleComponent": _per_element_scale_options,
    "NaturalGradientPerElementScaleComponent": _per_element_scale_options,
    "PerElementOffsetComponent": _per_element_offset_options,
    "FixedScaleComponent": lambda f: {"dim": _vector_dim(f, "Scales")},
    "FixedBiasComponent": lambda f: {"dim": _vector_dim(f, "Bias")},
    "ConstantFunctionComponent": _constant_function_options,
    "PnormComponent": _in_out_options,
    "ElementwiseProductComponent": _in_out_options,
    "SumBlockComponent": _in_out_options,
    "SumGroupComponent": _sum_group_options,
    "PermuteComponent": _permute_options,
    "ClipGradientComponent": _clip_gradient_options,
    "BackpropTruncationComponent": _backprop_truncation_options,
    "BlockAffineComponent": _block_affine_options,
    "RepeatedAffineComponent": _repeated_affine_options,
    "NaturalGradientRepeatedAffineComponent": _repeated_affine_options,
    "StatisticsExtractionComponent": _stats_extraction_options,
    "StatisticsPoolingComponent": _stats_pooling_options,
    "DistributeComponent": _in_out_options,
    "MaxpoolingComponent": _maxpooling_options,
    "SpecAugmentTimeMaskComponent": _spec_augment_options,
}

#: The Kaldi component types `read_model` turns into symnet components (those registered in COMPONENTS).
READABLE_TYPES = frozenset(_READERS)


def _readable(kaldi_type: str) -> bool:
    return kaldi_type in _READERS and kaldi_type in COMPONENTS


def _derive(component: NnetComponent, file: str) -> tuple[ComponentLine, _Fields]:
    f = _Fields(component, file)
    if not _readable(component.type):
        known = ", ".join(sorted(t for t in _READERS if t in COMPONENTS))
        raise f.error(f"symnet cannot build a {component.type} from a model file (it reads: {known})")
    options = _READERS[component.type](f)
    line = ComponentLine(name=component.name, type=component.type,
                         options=[(key, _option_text(value)) for key, value in options.items()])
    return line, f


def component_line(component: NnetComponent, *, file: str = "<model>") -> ComponentLine:
    """The `component` config line whose options build `component` (a component of a model file) again,
    up to its parameter values. ModelFormatError for types symnet cannot build or malformed fields."""
    return _derive(component, file)[0]


# ----- reading: the network ---------------------------------------------------------------------


def _build_one(line: ComponentLine, fields: _Fields) -> Component:
    try:
        return COMPONENTS[line.type](line.name, dict(line.options), _PLACEHOLDER)
    except SymnetError as e:
        text = getattr(e, "message", str(e))
        raise fields.error(f"the stored values do not make a valid component: {text}") from None


def _config_error(file: str, error: SymnetError) -> ModelFormatError:
    text = str(error)
    return ModelFormatError(f"{file}: the model's config lines do not build a network: {text}")


def model_from_nnet(nnet: NnetFile, *, file: str = "<model>") -> KaldiModel:
    """The KaldiModel of a model file's content (see the module doc). `file` names it in errors."""
    if not isinstance(nnet, NnetFile):
        raise TypeError(f"model_from_nnet takes an NnetFile, got {type(nnet).__name__}")
    try:
        node_lines = parse_config(nnet.config, file=f"{file}[config]")
    except ConfigError as e:
        raise _config_error(file, e) from None
    bad = [line for line in node_lines if isinstance(line, ComponentLine)]
    if bad:
        raise ModelFormatError(f"{file}: the config lines of a model file hold nodes only, not 'component' lines "
                               f"(found component {bad[0].name})")
    stored = {c.name: c for c in nnet.components}
    used: dict[str, None] = {}
    for line in node_lines:
        if isinstance(line, ComponentNode):
            if line.component not in stored:
                raise ModelFormatError(f"{file}: component-node {line.name} uses component {line.component!r}, "
                                       "which the file does not have")
            used.setdefault(line.component)

    component_lines: list[ComponentLine] = []
    built: dict[str, tuple[Component, _Fields]] = {}
    for c in nnet.components:  # Kaldi's order of components
        if c.name not in used:
            continue
        line, fields = _derive(c, file)
        component_lines.append(line)
        built[c.name] = (_build_one(line, fields), fields)

    _check_dims(node_lines, built, file)
    try:
        network = build_network(component_lines + node_lines)
    except (ConfigError, DescriptorError, ParameterError) as e:
        raise _config_error(file, e) from None

    params = dict(network.params)
    for layer in walk([layer for _, layer in network.structure.outputs]):
        if not isinstance(layer, Component) or layer.name not in stored:
            continue
        c, fields = stored[layer.name], built[layer.name][1]
        for field in layer.param_fields:
            weight = getattr(layer, field)
            if not isinstance(weight, Weight) or weight.name not in params:
                continue
            token = _token_of(c, field)
            if token is None:
                raise fields.error(f"missing the parameter <{_field_token(field)}>", _field_token(field))
            value = np.asarray(c[token])
            if value.dtype.kind != "f":
                raise fields.error(f"expected numbers, got {_describe(c[token])}", token)
            if tuple(value.shape) != tuple(weight.shape):
                raise fields.error(f"has shape {tuple(value.shape)}, but the component's other fields make it "
                                   f"{tuple(weight.shape)}", token)
            params[weight.name] = jnp.asarray(value, dtype=jnp.float32)
    network = network.replace(params=params)
    return KaldiModel(network, priors=nnet.priors, transition_model=nnet.transition_model, source=nnet,
                      reference=network.network.structure)


def _field_token(field: str) -> str:
    from .model_io import field_to_token

    return field_to_token(field)


def _token_of(component: NnetComponent, field: str) -> str | None:
    return next((t for t in component.tokens if token_to_field(t) == field), None)


def _check_dims(lines: list[ConfigLine], built: Mapping[str, tuple[Component, _Fields]], file: str) -> None:
    """ModelFormatError naming the component and token where stored dims disagree with the node lines."""
    dims: dict[str, int] = {}
    for line in lines:
        if isinstance(line, InputNode):
            dims[line.name] = line.dim
        elif isinstance(line, DimRangeNode):
            dims[line.name] = line.dim
        elif isinstance(line, ComponentNode):
            dims[line.name] = built[line.component][0].output_dim
    for line in lines:
        if not isinstance(line, ComponentNode):
            continue
        try:
            got = _descriptor_dim(line.descriptor, dims, line)
        except KeyError:
            continue  # a reference to an unknown node: build_network names it
        except ConfigError as e:
            raise _config_error(file, e) from None
        component, fields = built[line.component]
        if got != component.input_dim:
            origin = fields.origin.get("input", "its fields")
            raise ModelFormatError(
                f"{file}: component {line.component!r} ({component.kaldi_type}): {origin}, which makes its input "
                f"dim {component.input_dim}, but component-node {line.name} gives it "
                f"input={write_descriptor(line.descriptor)} of dim {got}")


def parse_model(data: bytes, *, file: str = "<bytes>") -> KaldiModel:
    """The KaldiModel of a Kaldi model file given as bytes (text or binary, raw nnet or acoustic model)."""
    return model_from_nnet(parse_nnet(data, file=file), file=file)


def read_model(path: str | os.PathLike[str]) -> KaldiModel:
    """Read a Kaldi nnet3 model file: a raw nnet (nnet3-init, nnet3-copy) or an acoustic model
    (nnet3-am-init, final.mdl), text or binary. ModelFormatError if it is malformed or inconsistent."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        data = f.read()
    return parse_model(data, file=path)


def is_kaldi_model(path: str | os.PathLike[str]) -> bool:
    """Whether the file looks like a Kaldi model file (binary, or text starting <Nnet3> / <TransitionModel>)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return False
    if head.startswith(b"\0B"):
        return True
    word = head.lstrip().split(b" ", 1)[0].split(b"\n", 1)[0]
    return word in (b"<Nnet3>", b"<TransitionModel>")


# ----- writing: components -> fields ------------------------------------------------------------


def _opt(c: Component, key: str, default: Any) -> Any:
    value = c.option(key, default)
    return default if value is None else value


def _updatable_fields(c: Component) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    factor = _opt(c, "learning-rate-factor", 1.0)
    if factor != 1.0:
        out.append(("LearningRateFactor", np.float32(factor)))
    if _opt(c, "is-gradient", False):
        out.append(("IsGradient", True))
    max_change = _opt(c, "max-change", 0.0)
    if max_change > 0.0:
        out.append(("MaxChange", np.float32(max_change)))
    l2 = _opt(c, "l2-regularize", 0.0)
    if l2 > 0.0:
        out.append(("L2Regularize", np.float32(l2)))
    out.append(("LearningRate", np.float32(_opt(c, "learning-rate", 0.001))))
    return out


class _Params:
    """A component's parameter values from the network's parameters, as Kaldi's float32 arrays."""

    def __init__(self, component: Component, params: Mapping[str, Any]):
        self.c = component
        self.params = params

    def __call__(self, field: str) -> np.ndarray:
        weight = getattr(self.c, field)
        name = getattr(weight, "name", None)
        if not isinstance(weight, Weight) or name not in self.params:
            raise ModelWriteError(f"component {self.c.name!r} ({self.c.kaldi_type}): its {field} is not a parameter "
                                  f"of the network ({type(weight).__name__}); a model file stores arrays")
        return np.array(self.params[name], dtype=np.float32)


def _f32(value: Any) -> np.float32:
    return np.float32(value)


def _empty() -> np.ndarray:
    return np.zeros(0, np.float32)


def _affine_fields(c: Any, p: _Params) -> list[tuple[str, Any]]:
    out = _updatable_fields(c) + [("LinearParams", p("linear_params")), ("BiasParams", p("bias_params"))]
    orthonormal = _opt(c, "orthonormal-constraint", 0.0)
    if c.kaldi_type == "AffineComponent":
        if orthonormal != 0.0:
            out.append(("OrthonormalConstraint", _f32(orthonormal)))
        return out
    out += [("RankIn", int(_opt(c, "rank-in", 20))), ("RankOut", int(_opt(c, "rank-out", 80)))]
    if orthonormal != 0.0:
        out.append(("OrthonormalConstraint", _f32(orthonormal)))
    out += [("UpdatePeriod", int(_opt(c, "update-period", 4))),
            ("NumSamplesHistory", _f32(_opt(c, "num-samples-history", 2000.0))),
            ("Alpha", _f32(_opt(c, "alpha", 4.0)))]
    return out


def _linear_fields(c: Any, p: _Params) -> list[tuple[str, Any]]:
    out = _updatable_fields(c) + [("Params", p("params"))]
    orthonormal = _opt(c, "orthonormal-constraint", 0.0)
    if orthonormal != 0.0:
        out.append(("OrthonormalConstraint", _f32(orthonormal)))
    return out + [("UseNaturalGradient", bool(_opt(c, "use-natural-gradient", True))),
                  ("RankInOut", (int(_opt(c, "rank-in", 20)), int(_opt(c, "rank-out", 80)))),
                  ("Alpha", _f32(_opt(c, "alpha", 4.0))),
                  ("NumSamplesHistory", _f32(_opt(c, "num-samples-history", 2000.0))),
                  ("UpdatePeriod", int(_opt(c, "update-period", 4)))]


def _tdnn_fields(c: Any, p: _Params) -> list[tuple[str, Any]]:
    return _updatable_fields(c) + [
        ("TimeOffsets", np.array(c.time_offsets, dtype=np.int32)),
        ("LinearParams", p("linear_params")), ("BiasParams", p("bias_params")),
        ("OrthonormalConstraint", _f32(_opt(c, "orthonormal-constraint", 0.0))),
        ("UseNaturalGradient", bool(_opt(c, "use-natural-gradient", True))),
        ("NumSamplesHistory", _f32(_opt(c, "num-samples-history", 2000.0))),
        ("AlphaInOut", (_f32(_opt(c, "alpha-in", 4.0)), _f32(_opt(c, "alpha-out", 4.0)))),
        ("RankInOut", (int(_opt(c, "rank-in", 20)), int(_opt(c, "rank-out", 80)))),
    ]


def _nonlinear_fields(c: Any, p: _Params) -> list[tuple[str, Any]]:
    from ..components.nonlinear import UNSET_THRESHOLD

    out: list[tuple[str, Any]] = [("Dim", c.dim)]
    block_dim = int(_opt(c, "block-dim", c.dim))
    if block_dim != c.dim:
        out.append(("BlockDim", block_dim))
    out += [("ValueAvg", _empty()), ("DerivAvg", _empty()), ("Count", np.float64(0.0)), ("OderivRms", _empty()),
            ("OderivCount", np.float64(0.0)), ("NumDimsSelfRepaired", np.float64(0.0)),
            ("NumDimsProcessed", np.float64(0.0))]
    for key, token in (("self-repair-lower-threshold", "SelfRepairLowerThreshold"),
                       ("self-repair-upper-threshold", "SelfRepairUpperThreshold")):
        value = _opt(c, key, UNSET_THRESHOLD)
        if value != UNSET_THRESHOLD:
            out.append((token, _f32(value)))
    scale = _opt(c, "self-repair-scale", 0.0)
    if scale != 0.0:
        out.append(("SelfRepairScale", _f32(scale)))
    return out


def _normalize_fields(c: Any, p: _Params) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = [("InputDim", c.in_dim)]
    if c.block_dim != c.in_dim:
        out.append(("BlockDim", c.block_dim))
    return out + [("TargetRms", _f32(c.target_rms)), ("AddLogStddev", bool(c.add_log_stddev))]


def _batchnorm_fields(c: Any, p: _Params) -> list[tuple[str, Any]]:
    count = p("count")
    return [("Dim", c.dim), ("BlockDim", c.block_dim), ("Epsilon", _f32(c.epsilon)), ("TargetRms", _f32(c.target_rms)),
            ("TestMode", bool(c.test_mode)), ("Count", np.float64(count.reshape(()))),
            ("StatsMean", p("stats_mean")), ("StatsVar", p("stats_var"))]


def _general_dropout_fields(c: Any, p: _Params) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = [("Dim", c.dim), ("BlockDim", c.block_dim), ("TimePeriod", c.time_period),
                                  ("DropoutProportion", _f32(c.dropout_proportion))]
    if c.continuous:
        out.append(("Continuous", None))
    if c.test_mode:
        out.append(("TestMode", None))
    return out


def _lstm_fields(c: Any, p: _Params) -> list[tuple[str, Any]]:
    params = p("params")
    cell_dim = params.shape[1]
    config = c.option("self-repair-config")
    if config is None or len(config) != 10:
        config = (0.05, 0.05, 0.2, 0.05, 0.2) + (1.0e-5,) * 5
    out = _updatable_fields(c) + [
        ("Params", params), ("ValueAvg", np.zeros((5, cell_dim), np.float32)),
        ("DerivAvg", np.zeros((5, cell_dim), np.float32)),
        ("SelfRepairConfig", np.array(config, dtype=np.float32)), ("SelfRepairProb", np.zeros(5, np.float32))]
    if c.use_dropout:
        out.append(("UseDropout", True))
    return out + [("Count", np.float64(0.0))]


def _gru_fields(c: Any, p: _Params) -> list[tuple[str, Any]]:
    return _updatable_fields(c) + [
        ("CellDim", c.cell_dim), ("RecurrentDim", c.recurrent_dim), ("w_h", p("w_h")),
        ("ValueAvg", np.zeros(c.cell_dim, np.float32)), ("DerivAvg", np.zeros(c.cell_dim, np.float32)),
        ("SelfRepairTotal", np.float64(0.0)), ("Count", np.float64(0.0)),
        ("SelfRepairThreshold", _f32(_opt(c, "self-repair-threshold", 0.2))),
        ("SelfRepairScale", _f32(_opt(c, "self-repair-scale", 1.0e-5))), ("Alpha", _f32(_opt(c, "alpha", 4.0))),
        ("RankInOut", (int(_opt(c, "rank-in", 20)), int(_opt(c, "rank-out", 80)))),
        ("UpdatePeriod", int(_opt(c, "update-period", 4)))]


def _output_gru_fields(c: Any, p: _Params) -> list[tuple[str, Any]]:
    return _updatable_fields(c) + [
        ("CellDim", c.cell_dim), ("w_h", p("w_h")),
        ("ValueAvg", np.zeros(c.cell_dim, np.float32)), ("DerivAvg", np.zeros(c.cell_dim, np.float32)),
        ("SelfRepairTotal", np.float64(0.0)), ("Count", np.float64(0.0)),
        ("SelfRepairThreshold", _f32(_opt(c, "self-repair-threshold", 0.2))),
        ("SelfRepairScale", _f32(_opt(c, "self-repair-scale", 1.0e-5))), ("Alpha", _f32(_opt(c, "alpha", 4.0))),
        ("Rank", int(_opt(c, "rank", 8))), ("UpdatePeriod", int(_opt(c, "update-period", 10)))]


def _per_element_scale_fields(c: Any, p: _Params) -> list[tuple[str, Any]]:
    out = _updatable_fields(c) + [("Params", p("params"))]
    if c.kaldi_type == "NaturalGradientPerElementScaleComponent":
        out += [("IsGradient", bool(_opt(c, "is-gradient", False))), ("Rank", int(_opt(c, "rank", 8))),
                ("UpdatePeriod", int(_opt(c, "update-period", 10))),
                ("NumSamplesHistory", _f32(_opt(c, "num-samples-history", 2000.0))),
                ("Alpha", _f32(_opt(c, "alpha", 4.0)))]
    return out


def _stats_pooling_fields(c: Any, p: _Params) -> list[tuple[str, Any]]:
    return [("InputDim", c.in_dim), ("InputPeriod", c.input_period), ("LeftContext", c.left_context),
            ("RightContext", c.right_context), ("NumLogCountFeatures", c.num_log_count_features),
            ("OutputStddevs", bool(c.output_stddevs)), ("VarianceFloor", _f32(c.variance_floor))]


#: Kaldi type -> the fields Kaldi's Write gives for a symnet component, in Kaldi's order.
_WRITERS: dict[str, Callable[[Any, _Params], list[tuple[str, Any]]]] = {
    "AffineComponent": _affine_fields,
    "NaturalGradientAffineComponent": _affine_fields,
    "LinearComponent": _linear_fields,
    "FixedAffineComponent": lambda c, p: [("LinearParams", p("linear_params")), ("BiasParams", p("bias_params"))],
    "TdnnComponent": _tdnn_fields,
    **{t: _nonlinear_fields for t in _NONLINEAR_TYPES},
    "NormalizeComponent": _normalize_fields,
    "BatchNormComponent": _batchnorm_fields,
    "DropoutComponent": lambda c, p: [("Dim", c.dim), ("DropoutProportion", _f32(c.dropout_proportion)),
                                      ("DropoutPerFrame", bool(c.dropout_per_frame)),
                                      ("TestMode", bool(c.test_mode))],
    "GeneralDropoutComponent": _general_dropout_fields,
    "NoOpComponent": lambda c, p: [("Dim", c.dim), ("BackpropScale", _f32(c.backprop_scale))],
    "LstmNonlinearityComponent": _lstm_fields,
    "GruNonlinearityComponent": _gru_fields,
    "OutputGruNonlinearityComponent": _output_gru_fields,
    "ScaleAndOffsetComponent": lambda c, p: _updatable_fields(c) + [
        ("Dim", c.dim), ("Scales", p("scales")), ("Offsets", p("offsets")),
        ("UseNaturalGradient", bool(_opt(c, "use-natural-gradient", True))), ("Rank", int(_opt(c, "rank", 20)))],
    "PerElementScaleComponent": _per_element_scale_fields,
    "NaturalGradientPerElementScaleComponent": _per_element_scale_fields,
    "PerElementOffsetComponent": lambda c, p: _updatable_fields(c) + [
        ("Offsets", p("offsets")), ("Dim", c.dim),
        ("UseNaturalGradient", bool(_opt(c, "use-natural-gradient", True)))],
    "FixedScaleComponent": lambda c, p: [("Scales", p("scales"))],
    "FixedBiasComponent": lambda c, p: [("Bias", p("bias"))],
    "ConstantFunctionComponent": lambda c, p: _updatable_fields(c) + [
        ("InputDim", c.in_dim), ("Output", p("output")), ("IsUpdatable", bool(c.is_updatable)),
        ("UseNaturalGradient", bool(_opt(c, "use-natural-gradient", True)))],
    "PnormComponent": lambda c, p: [("InputDim", c.in_dim), ("OutputDim", c.out_dim)],
    "ElementwiseProductComponent": lambda c, p: [("InputDim", c.in_dim), ("OutputDim", c.out_dim)],
    "SumBlockComponent": lambda c, p: [("InputDim", c.in_dim), ("OutputDim", c.out_dim), ("Scale", _f32(c.scale))],
    "SumGroupComponent": lambda c, p: [("Sizes", np.array(c.sizes, dtype=np.int32))],
    "PermuteComponent": lambda c, p: [("ColumnMap", np.array(c.column_map, dtype=np.int32))],
    "ClipGradientComponent": lambda c, p: [
        ("Dim", c.dim), ("ClippingThreshold", _f32(c.clipping_threshold)),
        ("NormBasedClipping", bool(c.norm_based_clipping)),
        ("SelfRepairClippedProportionThreshold", _f32(_opt(c, "self-repair-clipped-proportion-threshold", 0.01))),
        ("SelfRepairTarget", _f32(_opt(c, "self-repair-target", 0.0))),
        ("SelfRepairScale", _f32(_opt(c, "self-repair-scale", 1.0))),
        ("NumElementsClipped", 0), ("NumElementsProcessed", 0), ("NumSelfRepaired", 0), ("NumBackpropped", 0)],
    "BackpropTruncationComponent": lambda c, p: [
        ("Dim", c.dim), ("Scale", _f32(c.scale)), ("ClippingThreshold", _f32(c.clipping_threshold)),
        ("ZeroingThreshold", _f32(c.zeroing_threshold)), ("ZeroingInterval", int(c.zeroing_interval)),
        ("RecurrenceInterval", int(c.recurrence_interval)), ("NumElementsClipped", np.float64(0.0)),
        ("NumElementsZeroed", np.float64(0.0)), ("NumElementsProcessed", np.float64(0.0)),
        ("NumZeroingBoundaries", np.float64(0.0))],
    "BlockAffineComponent": lambda c, p: _updatable_fields(c) + [
        ("NumBlocks", c.num_blocks), ("LinearParams", p("linear_params")), ("BiasParams", p("bias_params"))],
    "RepeatedAffineComponent": lambda c, p: _updatable_fields(c) + [
        ("NumRepeats", c.num_repeats), ("LinearParams", p("linear_params")), ("BiasParams", p("bias_params"))],
    "NaturalGradientRepeatedAffineComponent": lambda c, p: _updatable_fields(c) + [
        ("NumRepeats", c.num_repeats), ("LinearParams", p("linear_params")), ("BiasParams", p("bias_params"))],
    "StatisticsExtractionComponent": lambda c, p: [
        ("InputDim", c.in_dim), ("InputPeriod", c.input_period), ("OutputPeriod", c.output_period),
        ("IncludeVarinance", bool(c.include_variance))],
    "StatisticsPoolingComponent": _stats_pooling_fields,
    "DistributeComponent": lambda c, p: [("InputDim", c.in_dim), ("OutputDim", c.out_dim)],
    "MaxpoolingComponent": lambda c, p: [
        (f"{kind}{a.upper()}{what}", int(getattr(c, f"{attr}_{a}_{what.lower()}")))
        for kind, attr, what in (("Input", "input", "Dim"), ("Pool", "pool", "Size"), ("Pool", "pool", "Step"))
        for a in "xyz"],
    "SpecAugmentTimeMaskComponent": lambda c, p: [
        ("Dim", c.dim), ("ZeroedProportion", _f32(c.zeroed_proportion)),
        ("TimeMaskMaxFrames", int(c.time_mask_max_frames))],
}

#: The Kaldi component types `write_model` can write for a component built in symnet.
WRITABLE_TYPES = frozenset(_WRITERS)


def nnet_component(component: Component, params: Mapping[str, Any]) -> NnetComponent:
    """The `NnetComponent` Kaldi would write for `component` (a symnet component) with parameter values
    `params` (the network's, by Weight name): Kaldi's tokens in its write order, empty statistics.
    ModelWriteError for a type symnet cannot write."""
    kind = getattr(component, "kaldi_type", "") or type(component).__name__
    writer = _WRITERS.get(kind)
    if writer is None:
        raise ModelWriteError(f"component {component.name!r}: symnet cannot write a {kind} to a Kaldi model file "
                              f"(it writes: {', '.join(sorted(_WRITERS))})")
    try:
        fields = writer(component, _Params(component, params))
    except (TypeError, AttributeError) as e:
        raise ModelWriteError(f"component {component.name!r} ({kind}): cannot write it: {e}") from None
    return NnetComponent(component.name, kind, fields)


def _updated(stored: NnetComponent, component: Component, params: Mapping[str, Any]) -> NnetComponent:
    """`stored` (as read) with the network's current parameter values; unchanged values keep their bits."""
    values: dict[str, Any] = {}
    for field in component.param_fields:
        weight = getattr(component, field)
        name = getattr(weight, "name", None)
        token = _token_of(stored, field)
        if token is None or name not in params:
            continue
        old = stored[token]
        new = np.asarray(params[name])
        old_array = np.asarray(old)
        if new.shape != old_array.shape:
            raise ModelWriteError(f"component {component.name!r}: parameter {name!r} has shape {new.shape}, the "
                                  f"stored <{token}> {old_array.shape}")
        if np.array_equal(new.astype(np.float32), old_array.astype(np.float32), equal_nan=True):
            continue
        if isinstance(old, np.ndarray):
            values[token] = new.astype(old.dtype)
        else:
            values[token] = old.dtype.type(new.reshape(()))
    return stored.replace(**values) if values else stored


# ----- writing: the network -------------------------------------------------------------------


def _bare(component: Component) -> Component:
    """The component without its input (to compare components used by different nodes)."""
    return attrs.evolve(component, input=_PLACEHOLDER)


def _network_lines(net: Network) -> tuple[list[ConfigLine], dict[str, Component]]:
    """The node lines Kaldi writes for `net` (no component lines) and its components by name, in order."""
    roots = [layer for _, layer in net.structure.outputs]
    order = walk(roots)
    under_node = {id(layer.arg) for layer in order if isinstance(layer, Node)}
    inputs: dict[str, Input] = {}
    nodes: dict[str, Node] = {}
    for layer in order:
        if isinstance(layer, Identity):
            raise ModelWriteError("the network reads Identity() (x); a Kaldi model needs named inputs: "
                                  "Input(name, dim)")
        if isinstance(layer, Input):
            inputs.setdefault(layer.name, layer)
        elif isinstance(layer, Component) and id(layer) not in under_node:
            raise ModelWriteError(f"component {layer.name!r} ({layer.kaldi_type}) is not the operand of a Node; a "
                                  "Kaldi model needs a component-node for it: Node(name, component)")
        elif isinstance(layer, Node):
            other = nodes.setdefault(layer.name, layer)
            if other is not layer and other != layer:
                raise ModelWriteError(f"two different nodes are named {layer.name!r}")
    lines: list[ConfigLine] = [InputNode(name=name, dim=layer.dim) for name, layer in inputs.items()]
    components: dict[str, Component] = {}
    try:
        for name in _write_order(nodes):
            node = nodes[name]
            arg = node.arg
            if isinstance(arg, Component) and hasattr(arg, "input"):
                known = components.setdefault(arg.name, arg)
                if known is not arg and _bare(known) != _bare(arg):
                    raise ModelWriteError(f"node {name!r}: two different components are named {arg.name!r}")
                write_descriptor(arg.input)
                lines.append(ComponentNode(name=name, component=arg.name, descriptor=_by_name(arg.input)))
            elif isinstance(arg, DimRange) and isinstance(arg.arg, (Node, Input, Ref)):
                lines.append(DimRangeNode(name=name, input_node=arg.arg.name, dim_offset=arg.offset, dim=arg.dim))
            else:
                raise ModelWriteError(f"node {name!r}: a Kaldi node is a component or a DimRange of a node, not "
                                      f"{type(arg).__name__}")
        for name, layer in net.structure.outputs:
            write_descriptor(layer)
            lines.append(OutputNode(name=name, descriptor=_by_name(layer), objective="linear"))
    except (ConfigError, DescriptorError) as e:
        raise ModelWriteError(str(e).splitlines()[0]) from None
    return lines, components


def output_dims(network: KaldiModel | KaldiNetwork | Network) -> dict[str, int]:
    """The dim of each output of a network (from its node lines and components' dims)."""
    net = _model(network).network.network
    lines, components = _network_lines(net)
    dims: dict[str, int] = {}
    out: dict[str, int] = {}
    try:
        for line in lines:
            if isinstance(line, (InputNode, DimRangeNode)):
                dims[line.name] = line.dim
            elif isinstance(line, ComponentNode):
                dims[line.name] = components[line.component].output_dim
            elif isinstance(line, OutputNode):
                out[line.name] = _descriptor_dim(line.descriptor, dims, line)
    except (ConfigError, KeyError) as e:
        raise ModelWriteError(f"cannot work out the dims of the network's outputs: {e}") from None
    return out


def model_to_nnet(model: KaldiModel | KaldiNetwork | Network, *, raw: bool = False) -> NnetFile:
    """The `NnetFile` of a model: its source file with the current parameters when the network's structure
    is the one read, else node lines and components written from the network (see the module doc).
    `raw` leaves out an acoustic model's transition model and priors."""
    model = _model(model)
    kn = model.network
    net = kn.network
    source = model.source
    params = net.params
    unchanged = (source is not None and model.reference is not None and net.structure == model.reference
                 and dict(kn.objectives) == _objectives(source.config))
    if unchanged:
        built = {layer.name: layer for layer in walk([layer for _, layer in net.structure.outputs])
                 if isinstance(layer, Component)}
        components = tuple(_updated(c, built[c.name], params) if c.name in built else c for c in source.components)
        config = source.config
    else:
        lines, by_name = _network_lines(net)
        objectives = kn.objectives
        lines = [attrs.evolve(line, objective=objectives.get(line.name, "linear"))
                 if isinstance(line, OutputNode) else line for line in lines]
        reference: dict[str, Component] = {}
        if source is not None and model.reference is not None:
            reference = {layer.name: layer for layer in walk([layer for _, layer in model.reference.outputs])
                         if isinstance(layer, Component)}
        stored = {c.name: c for c in source.components} if source is not None else {}
        out = []
        for name, component in by_name.items():
            old = reference.get(name)
            if name in stored and old is not None and _bare(old) == _bare(component):
                out.append(_updated(stored[name], component, params))
            else:
                out.append(nnet_component(component, params))
        components = tuple(out)
        config = write_config(lines)
        if source is not None:
            try:
                same = write_config(parse_config(source.config)) == config
            except SymnetError:
                same = False
            if same:
                config = source.config
    if raw or model.transition_model is None:
        if model.priors is not None and not raw and len(model.priors):
            raise ModelWriteError("the model has priors but no transition model: an acoustic model needs both; "
                                  "write it raw (raw=True) to leave the priors out")
        return NnetFile(config, components)
    if unchanged and source.is_am:
        left, right = source.left_context, source.right_context
    else:
        try:
            left, right = net.context("output")
        except SymnetError as e:
            raise ModelWriteError(f"cannot work out the context of output 'output' for the acoustic model: "
                                  f"{str(e).splitlines()[0]}") from None
    priors = model.priors if model.priors is not None else np.zeros(0, np.float32)
    return NnetFile(config, components, transition_model=model.transition_model, left_context=left,
                    right_context=right, priors=priors)


def _objectives(config: str) -> dict[str, str]:
    try:
        return {line.name: line.objective for line in parse_config(config) if isinstance(line, OutputNode)}
    except SymnetError:
        return {}


def format_model(model: KaldiModel | KaldiNetwork | Network, *, binary: bool = True, raw: bool = False) -> bytes:
    """The bytes of the model file Kaldi would write (`nnet3-copy --binary=...`; `raw` as in
    `nnet3-am-copy --raw=true`)."""
    return format_nnet(model_to_nnet(model, raw=raw), binary=binary)


def write_model(path: str | os.PathLike[str], model: KaldiModel | KaldiNetwork | Network, *, binary: bool = True,
                raw: bool = False) -> None:
    """Write a Kaldi model file, atomically (a failure leaves any existing file untouched)."""
    write_nnet(path, model_to_nnet(model, raw=raw), binary=binary)
