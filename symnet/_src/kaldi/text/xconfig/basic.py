"""Kaldi's basic xconfig layers (steps/libs/nnet3/xconfig/basic_layers.py).

- `output name=... input=...`: just an output-node.
- `output-layer`: an affine component (natural gradient, zero-initialised:
  `param-stddev=0.0 bias-stddev=0.0`), an optional log-softmax, an
  output-node; optionally a linear bottleneck before the affine. Later
  layers may use its auxiliary outputs `name.affine` and `name.log-softmax`.
- `relu-layer`, `relu-batchnorm-layer`, `sigmoid-layer`, `tanh-layer`, ...:
  an affine component followed by the components the name lists, in order
  (`relu`, `sigmoid`, `tanh`, `renorm`, `batchnorm`, `so` for
  ScaleAndOffsetComponent, `dropout`); the layer's output is the last one,
  e.g. `tdnn1.batchnorm`.
- `fixed-affine-layer`: a FixedAffineComponent read from
  `affine-transform-file` (an LDA-like transform; init.config gets an
  output-node at its input, for accumulating the statistics).
- `affine-layer`: a NaturalGradientAffineComponent with Kaldi's
  initialisation options written out.
- `idct-layer`: a FixedAffineComponent whose matrix, the inverse DCT with
  liftering (MFCC to filterbank), the layer writes to `affine-transform-file`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .base import Lines, XLayer, both, fmt, layer_types

__all__ = ["XAffine", "XBasic", "XFixedAffine", "XIdct", "XOutput", "XOutputLayer", "idct_matrix"]


@layer_types("output")
class XOutput(XLayer):
    """`output name=output input=...`: an output-node and nothing else."""

    referable = False

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {"input": "[-1]", "dim": -1, "objective-type": "linear", "output-delay": 0}

    def check(self) -> None:
        self.require(
            self.config["objective-type"] in ("linear", "quadratic"),
            f"objective-type must be linear or quadratic, got {self.config['objective-type']}",
            "objective-type",
        )

    def output_name(self, aux: str | None = None) -> str:
        return self.name

    def output_dim(self, aux: str | None = None) -> int:
        return self.input.dim

    def lines(self) -> Lines:
        descriptor = self.input.text
        if self.config["output-delay"] != 0:
            descriptor = f"Offset({descriptor}, {self.config['output-delay']})"
        return both([f"output-node name={self.name} input={descriptor} objective={self.config['objective-type']}"])


@layer_types("output-layer")
class XOutputLayer(XLayer):
    """`output-layer name=output dim=3000`: affine (zero-initialised), log-softmax, output-node."""

    referable = False

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {
            "input": "[-1]",
            "dim": -1,
            "bottleneck-dim": -1,
            "orthonormal-constraint": 1.0,
            "include-log-softmax": True,
            "objective-type": "linear",
            "output-delay": 0,
            "ng-affine-options": "",
            "ng-linear-options": "",
            "learning-rate-factor": "",
            "l2-regularize": "",
            "max-change": 1.5,
            "param-stddev": 0.0,
            "bias-stddev": 0.0,
        }

    def check(self) -> None:
        self.require(
            self.config["objective-type"] in ("linear", "quadratic"),
            f"objective-type must be linear or quadratic, got {self.config['objective-type']}",
            "objective-type",
        )
        self.require(
            self.config["orthonormal-constraint"] > 0.0,
            "orthonormal-constraint must be positive (a floating constraint needs a separate "
            "linear-component followed by a batchnorm-component)",
            "orthonormal-constraint",
        )
        b = self.config["bottleneck-dim"]
        self.require(
            b < 0 or 0 < b < min(self.input.dim, self.config["dim"]),
            f"bottleneck-dim={b} must be positive and less than the input dim {self.input.dim} and dim",
            "bottleneck-dim",
        )

    def auxiliary_outputs(self) -> tuple[str, ...]:
        """Its affine node, and its log-softmax node when it has one (`output.affine` in a later layer)."""
        return ("affine", "log-softmax") if self.config["include-log-softmax"] else ("affine",)

    def output_name(self, aux: str | None = None) -> str:
        return f"{self.name}.{aux}" if aux else self.name

    def output_dim(self, aux: str | None = None) -> int:
        return self.config["dim"]

    def lines(self) -> Lines:
        c, name = self.config, self.name
        out: list[str] = []
        node, dim = self.input.text, self.input.dim
        if c["bottleneck-dim"] >= 0:
            linear = c["ng-linear-options"] + _passed(c, ("learning-rate-factor", "l2-regularize", "max-change"))
            constraint = c["orthonormal-constraint"]
            out.append(
                f"component name={name}.linear type=LinearComponent orthonormal-constraint={fmt(constraint)} "
                f"param-stddev={fmt(constraint / math.sqrt(dim))} input-dim={dim} "
                f"output-dim={c['bottleneck-dim']} max-change=0.75 {linear}"
            )
            out.append(f"component-node name={name}.linear component={name}.linear input={node}")
            node, dim = f"{name}.linear", c["bottleneck-dim"]
        affine = c["ng-affine-options"] + _passed(
            c,
            ("learning-rate-factor", "l2-regularize", "max-change", "param-stddev", "bias-stddev"),
        )
        out.append(
            f"component name={name}.affine type=NaturalGradientAffineComponent input-dim={dim} "
            f"output-dim={c['dim']} {affine}"
        )
        out.append(f"component-node name={name}.affine component={name}.affine input={node}")
        node = f"{name}.affine"
        if c["include-log-softmax"]:
            out.append(f"component name={name}.log-softmax type=LogSoftmaxComponent dim={c['dim']}")
            out.append(f"component-node name={name}.log-softmax component={name}.log-softmax input={node}")
            node = f"{name}.log-softmax"
        if c["output-delay"] != 0:
            node = f"Offset({node}, {c['output-delay']})"
        out.append(f"output-node name={name} input={node} objective={c['objective-type']}")
        return both(out)


def _positive(text: str) -> bool:
    """Whether `text` is a positive number (Kaldi's check of a pass-through learning-rate-factor)."""
    try:
        return float(text) > 0.0
    except ValueError:
        return False


def _passed(config: dict[str, Any], keys: tuple[str, ...]) -> str:
    """' key=value' for every key whose value is not '' (Kaldi's pass-through options)."""
    return "".join(f" {key}={fmt(config[key])}" for key in keys if config[key] != "")


_NONLINEARITIES = ("relu", "sigmoid", "tanh", "renorm", "batchnorm", "so", "dropout")


@layer_types(
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
)
class XBasic(XLayer):
    """An affine component and the components the layer's name lists (`relu-batchnorm-layer`)."""

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {
            "input": "[-1]",
            "dim": -1,
            "bottleneck-dim": -1,
            "self-repair-scale": 1.0e-05,
            "target-rms": 1.0,
            "ng-affine-options": "",
            "ng-linear-options": "",
            "dropout-proportion": 0.5,
            "dropout-per-dim": False,
            "dropout-per-dim-continuous": False,
            "add-log-stddev": False,
            "bias-stddev": "",
            "l2-regularize": "",
            "learning-rate-factor": "",
            "max-change": 0.75,
        }

    @property
    def nonlinearities(self) -> list[str]:
        return self.layer_type.split("-")[:-1]

    def check(self) -> None:
        c = self.config
        self.require(c["dim"] > 0, f"dim has invalid value {c['dim']}", "dim")
        b = c["bottleneck-dim"]
        self.require(b < 0 or 0 < b < c["dim"], f"bottleneck-dim has invalid value {b}", "bottleneck-dim")
        self.require(
            0.0 <= c["self-repair-scale"] <= 1.0,
            f"self-repair-scale has invalid value {c['self-repair-scale']}",
            "self-repair-scale",
        )
        self.require(c["target-rms"] >= 0.0, f"target-rms has invalid value {c['target-rms']}", "target-rms")
        factor = c["learning-rate-factor"]
        self.require(
            factor == "" or _positive(factor),
            f"learning-rate-factor has invalid value {factor}",
            "learning-rate-factor",
        )
        self.require(
            not c["add-log-stddev"] or self.nonlinearities[-1] == "renorm",
            "add-log-stddev needs a final renorm component",
            "add-log-stddev",
        )

    def output_name(self, aux: str | None = None) -> str:
        return f"{self.name}.{self.nonlinearities[-1]}"

    def output_dim(self, aux: str | None = None) -> int:
        return self.config["dim"]

    def lines(self) -> Lines:
        c, name = self.config, self.name
        dim = c["dim"] - (1 if c["add-log-stddev"] else 0)
        out: list[str] = []
        node, in_dim = self.input.text, self.input.dim
        if c["bottleneck-dim"] > 0:
            linear = c["ng-linear-options"] + _passed(c, ("max-change", "learning-rate-factor"))
            out.append(
                f"component name={name}.linear type=LinearComponent input-dim={in_dim} "
                f"orthonormal-constraint=1.0 output-dim={c['bottleneck-dim']} {linear}"
            )
            out.append(f"component-node name={name}.linear component={name}.linear input={node}")
            node, in_dim = f"{name}.linear", c["bottleneck-dim"]
        affine = c["ng-affine-options"] + _passed(
            c, ("max-change", "learning-rate-factor", "bias-stddev", "l2-regularize")
        )
        out.append(
            f"component name={name}.affine type=NaturalGradientAffineComponent input-dim={in_dim} "
            f"output-dim={dim} {affine}"
        )
        out.append(f"component-node name={name}.affine component={name}.affine input={node}")
        node = f"{name}.affine"
        kinds = self.nonlinearities
        for i, kind in enumerate(kinds):
            out.append(self._component(kind, dim, last=i == len(kinds) - 1))
            out.append(f"component-node name={name}.{kind} component={name}.{kind} input={node}")
            node = f"{name}.{kind}"
        return both(out)

    def _component(self, kind: str, dim: int, last: bool) -> str:
        c, head = self.config, f"component name={self.name}.{kind}"
        repair, rms = fmt(c["self-repair-scale"]), fmt(c["target-rms"])
        if kind == "relu":
            return f"{head} type=RectifiedLinearComponent dim={dim} self-repair-scale={repair}"
        if kind == "sigmoid":
            return f"{head} type=SigmoidComponent dim={dim} self-repair-scale={repair}"
        if kind == "tanh":
            return f"{head} type=TanhComponent dim={dim} self-repair-scale={repair}"
        if kind == "renorm":
            log_stddev = "true" if last and c["add-log-stddev"] else "false"
            return f"{head} type=NormalizeComponent dim={dim} target-rms={rms} add-log-stddev={log_stddev}"
        if kind == "batchnorm":
            return f"{head} type=BatchNormComponent dim={dim} target-rms={rms}"
        if kind == "so":
            return f"{head} type=ScaleAndOffsetComponent dim={dim} max-change=0.5 "
        if kind == "dropout":
            proportion = fmt(c["dropout-proportion"])
            if not (c["dropout-per-dim"] or c["dropout-per-dim-continuous"]):
                return f"{head} type=DropoutComponent dim={dim} dropout-proportion={proportion}"
            continuous = "continuous=true" if c["dropout-per-dim-continuous"] else ""
            return f"{head} type=GeneralDropoutComponent dim={dim} dropout-proportion={proportion} {continuous}"
        raise self.error(f"unknown nonlinearity {kind!r} (known: {', '.join(_NONLINEARITIES)})")


@layer_types("fixed-affine-layer")
class XFixedAffine(XLayer):
    """`fixed-affine-layer name=lda input=Append(-2,-1,0,1,2,ReplaceIndex(ivector, t, 0)) affine-transform-file=...`"""

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {"input": "[-1]", "dim": -1, "affine-transform-file": "", "delay": 0, "write-init-config": True}

    def check(self) -> None:
        self.require(
            self.config["affine-transform-file"] != "", "affine-transform-file must be set", "affine-transform-file"
        )

    def output_name(self, aux: str | None = None) -> str:
        return self.name

    def output_dim(self, aux: str | None = None) -> int:
        return self.config["dim"]

    def lines(self) -> Lines:
        c, name, descriptor = self.config, self.name, self.input.text
        out: Lines = []
        if c["write-init-config"]:
            if c["delay"] != 0:
                out += [
                    (("init",), f"component name={name}.delayed type=NoOpComponent dim={self.input.dim}"),
                    (("init",), f"component-node name={name}.delayed component={name}.delayed input={descriptor}"),
                    (("init",), f"output-node name=output input=Offset({name}.delayed, {c['delay']})"),
                ]
            else:
                out.append((("init",), f"output-node name=output input={descriptor}"))
        out.append((("final",), f"component name={name} type=FixedAffineComponent matrix={c['affine-transform-file']}"))
        out.append(
            (
                ("ref",),
                f"component name={name} type=FixedAffineComponent input-dim={self.input.dim} output-dim={c['dim']}",
            )
        )
        out.append((("ref", "final"), f"component-node name={name} component={name} input={descriptor}"))
        return out


@layer_types("affine-layer")
class XAffine(XLayer):
    """`affine-layer name=affine1 dim=512`: a NaturalGradientAffineComponent with its initialisation spelled out."""

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {
            "input": "[-1]",
            "dim": -1,
            "param-stddev": -1.0,
            "bias-stddev": 1.0,
            "bias-mean": 0.0,
            "max-change": 0.75,
            "l2-regularize": 0.0,
            "learning-rate-factor": 1.0,
            "ng-affine-options": "",
        }

    def derive(self) -> None:
        super().derive()
        if self.config["param-stddev"] < 0:
            self.config["param-stddev"] = 1.0 / math.sqrt(self.input.dim)

    def check(self) -> None:
        self.require(self.config["dim"] > 0, "dim specified is invalid", "dim")

    def output_name(self, aux: str | None = None) -> str:
        return self.name

    def output_dim(self, aux: str | None = None) -> int:
        return self.config["dim"]

    def lines(self) -> Lines:
        c = self.config
        options = (
            "".join(
                f" {key}={fmt(c[key])}"
                for key in ("param-stddev", "bias-stddev", "bias-mean", "max-change", "l2-regularize")
            )
            + c["ng-affine-options"]
        )
        return both(
            [
                f"component name={self.name} type=NaturalGradientAffineComponent input-dim={self.input.dim} "
                f"output-dim={c['dim']} {options}",
                f"component-node name={self.name} component={self.name} input={self.input.text}",
            ]
        )


def idct_matrix(input_dim: int, output_dim: int, cepstral_lifter: float) -> np.ndarray:
    """Kaldi's compute_idct_matrix (libs/common.py) with the zero bias column: output_dim x (input_dim + 1)."""
    n = np.arange(output_dim)[:, None]
    k = np.arange(input_dim)[None, :]
    matrix = math.sqrt(2.0 / output_dim) * np.cos(math.pi / output_dim * (n + 0.5) * k)
    matrix[:, 0] = math.sqrt(1.0 / output_dim)
    if cepstral_lifter != 0:
        lifter = 1.0 + 0.5 * cepstral_lifter * np.sin(math.pi * np.arange(input_dim) / cepstral_lifter)
        matrix = matrix / lifter[None, :]
    return np.concatenate([matrix, np.zeros((output_dim, 1))], axis=1)


@layer_types("idct-layer")
class XIdct(XLayer):
    """`idct-layer name=idct dim=40 cepstral-lifter=22 affine-transform-file=idct.mat`: MFCCs to filterbanks."""

    writes = ("affine-transform-file",)

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {
            "input": "[-1]",
            "dim": -1,
            "cepstral-lifter": 22.0,
            "affine-transform-file": "",
            "include-in-init": False,
        }

    def check(self) -> None:
        self.require(
            self.config["affine-transform-file"] != "", "affine-transform-file must be set", "affine-transform-file"
        )

    def output_name(self, aux: str | None = None) -> str:
        return self.name

    def output_dim(self, aux: str | None = None) -> int:
        return self.config["dim"]

    def matrices(self) -> dict[str, Any]:
        return {
            self.config["affine-transform-file"]: idct_matrix(
                self.input.dim, self.config["dim"], self.config["cepstral-lifter"]
            )
        }

    def lines(self) -> Lines:
        name, configs = self.name, ("ref", "final", "init") if self.config["include-in-init"] else ("ref", "final")
        texts = [
            f"component name={name} type=FixedAffineComponent matrix={self.config['affine-transform-file']}",
            f"component-node name={name} component={name} input={self.input.text}",
        ]
        return [(configs, text) for text in texts]
