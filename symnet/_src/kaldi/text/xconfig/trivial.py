"""Xconfig lines that map to a single component or node (steps/libs/nnet3/xconfig/trivial_layers.py).

`renorm-component`, `batchnorm-component`, `no-op-component`,
`linear-component`, `affine-component`, `scale-component` (a
NaturalGradientPerElementScaleComponent), `offset-component` (a
PerElementOffsetComponent), `dim-range-component` (a dim-range-node); the
component and its node are named after the layer. `combine-feature-maps-layer`
interleaves two or three feature maps with a PermuteComponent; `delta-layer`
appends deltas and delta-deltas and batch-normalises them; `spec-augment-layer`
is SpecAugment's frequency mask (a GeneralDropoutComponent) then its time mask
(a SpecAugmentTimeMaskComponent).
"""

from __future__ import annotations

from typing import Any

from .base import Lines, XLayer, both, fmt, layer_types

__all__ = ["XCombineFeatureMaps", "XDelta", "XDimRange", "XSingleComponent", "XSpecAugment"]


class XSingleComponent(XLayer):
    """One component and its component-node, both named after the layer."""

    #: The Kaldi component type.
    component_type = ""
    #: Pass-through options, in the order Kaldi writes them.
    passed: tuple[str, ...] = ()

    def output_name(self, aux: str | None = None) -> str:
        return self.name

    def output_dim(self, aux: str | None = None) -> int:
        return self.config["dim"] if "dim" in self.config else self.input.dim

    def component_options(self) -> str:
        return "".join(f" {key}={fmt(self.config[key])}" for key in self.passed if self.config[key] != "")

    def component_line(self) -> str:
        raise NotImplementedError

    def lines(self) -> Lines:
        out = [self.component_line(), f"component-node name={self.name} component={self.name} input={self.input.text}"]
        return both(out)


@layer_types("renorm-component")
class XRenorm(XSingleComponent):
    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {"input": "[-1]", "target-rms": 1.0}

    def check(self) -> None:
        self.require(self.config["target-rms"] > 0.0, "target-rms must be positive", "target-rms")

    def component_line(self) -> str:
        return (
            f"component name={self.name} type=NormalizeComponent dim={self.input.dim} "
            f"target-rms={fmt(self.config['target-rms'])}"
        )


@layer_types("batchnorm-component")
class XBatchnorm(XSingleComponent):
    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {"input": "[-1]", "target-rms": 1.0, "include-in-init": False}

    def check(self) -> None:
        self.require(self.config["target-rms"] > 0.0, "target-rms must be positive", "target-rms")

    def component_line(self) -> str:
        return (
            f"component name={self.name} type=BatchNormComponent dim={self.input.dim} "
            f"target-rms={fmt(self.config['target-rms'])}"
        )

    def lines(self) -> Lines:
        names = ("ref", "final", "init") if self.config["include-in-init"] else ("ref", "final")
        return [(names, text) for _, text in super().lines()]


@layer_types("no-op-component")
class XNoOp(XSingleComponent):
    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {"input": "[-1]"}

    def component_line(self) -> str:
        return f"component name={self.name} type=NoOpComponent dim={self.input.dim}"


@layer_types("linear-component")
class XLinear(XSingleComponent):
    passed = ("orthonormal-constraint", "max-change", "l2-regularize", "param-stddev", "learning-rate-factor")

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {
            "input": "[-1]",
            "dim": -1,
            "orthonormal-constraint": "",
            "max-change": 0.75,
            "l2-regularize": "",
            "param-stddev": "",
            "learning-rate-factor": "",
        }

    def check(self) -> None:
        self.require(self.config["dim"] > 0, "dim must be specified and > 0", "dim")

    def component_line(self) -> str:
        return (
            f"component name={self.name} type=LinearComponent input-dim={self.input.dim} "
            f"output-dim={self.config['dim']} {self.component_options()}"
        )


@layer_types("affine-component")
class XAffineComponent(XSingleComponent):
    passed = ("orthonormal-constraint", "max-change", "l2-regularize", "param-stddev", "bias-stddev")

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {
            "input": "[-1]",
            "dim": -1,
            "orthonormal-constraint": "",
            "max-change": 0.75,
            "param-stddev": "",
            "bias-stddev": "",
            "l2-regularize": "",
        }

    def check(self) -> None:
        self.require(self.config["dim"] > 0, "dim must be specified and > 0", "dim")

    def component_line(self) -> str:
        return (
            f"component name={self.name} type=NaturalGradientAffineComponent input-dim={self.input.dim} "
            f"output-dim={self.config['dim']} {self.component_options()}"
        )


@layer_types("scale-component", "offset-component")
class XPerElement(XSingleComponent):
    passed = ("learning-rate-factor", "max-change", "l2-regularize", "param-mean", "param-stddev")

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {
            "input": "[-1]",
            "l2-regularize": "",
            "max-change": 0.75,
            "param-mean": "",
            "param-stddev": "",
            "learning-rate-factor": "",
        }

    def component_line(self) -> str:
        kind = (
            "NaturalGradientPerElementScaleComponent"
            if self.layer_type == "scale-component"
            else "PerElementOffsetComponent"
        )
        return f"component name={self.name} type={kind} dim={self.input.dim} {self.component_options()} "


@layer_types("dim-range-component")
class XDimRange(XLayer):
    """`dim-range-component name=feature1 input=... dim=40 dim-offset=0`: a dim-range-node."""

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {"input": "[-1]", "dim": -1, "dim-offset": 0}

    def check(self) -> None:
        c, input_dim = self.config, self.input.dim
        self.require(0 < c["dim"] <= input_dim, f"dim must be > 0 and at most the input dim {input_dim}", "dim")
        self.require(c["dim-offset"] >= 0, "dim-offset must be >= 0", "dim-offset")
        self.require(
            c["dim-offset"] + c["dim"] <= input_dim,
            f"dim-offset plus dim must be at most the input dim {input_dim}",
            "dim-offset",
        )
        self.require(
            self.input.descriptor.operator is None and "(" not in self.input.text,
            f"the input of a dim-range-component must be a node, not {self.input.text}",
            "input",
        )

    def output_name(self, aux: str | None = None) -> str:
        return self.name

    def output_dim(self, aux: str | None = None) -> int:
        return self.config["dim"]

    def lines(self) -> Lines:
        c = self.config
        return both(
            [
                f"dim-range-node name={self.name} input-node={self.input.text} dim={c['dim']} "
                f"dim-offset={c['dim-offset']}"
            ]
        )


@layer_types("combine-feature-maps-layer")
class XCombineFeatureMaps(XSingleComponent):
    """Interleaves feature maps of `num-filters1`, `num-filters2` (and `num-filters3`) filters of one height."""

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {"input": "[-1]", "num-filters1": -1, "num-filters2": -1, "num-filters3": 0, "height": -1}

    def check(self) -> None:
        c = self.config
        f1, f2, f3, h = c["num-filters1"], c["num-filters2"], c["num-filters3"], c["height"]
        self.require(
            f1 > 0 and f2 > 0 and f3 >= 0 and h > 0, "invalid values of num-filters1, num-filters2 and/or height"
        )
        self.require(
            self.input.dim == (f1 + f2 + f3) * h,
            f"expected input-dim={(f1 + f2 + f3) * h} from num-filters1={f1}, num-filters2={f2}, "
            f"num-filters3={f3} and height={h}, but got input-dim={self.input.dim}",
            "input",
        )

    def component_line(self) -> str:
        c = self.config
        f1, f2, f3, h = c["num-filters1"], c["num-filters2"], c["num-filters3"], c["height"]
        column_map: list[int] = []
        for row in range(h):
            column_map += [row * f1 + f for f in range(f1)]
            column_map += [h * f1 + row * f2 + f for f in range(f2)]
            column_map += [h * (f1 + f2) + row * f3 + f for f in range(f3)]
        return f"component name={self.name} type=PermuteComponent column-map={','.join(map(str, column_map))} "


@layer_types("delta-layer")
class XDelta(XLayer):
    """The input, its deltas (-1,0,1) and delta-deltas (1,0,-2,0,1), appended and batch-normalised."""

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {"input": "[-1]"}

    def check(self) -> None:
        self.require(
            self.input.descriptor.operator is None and "(" not in self.input.text,
            f"the input of a delta-layer must be a node, not {self.input.text}",
            "input",
        )

    def output_name(self, aux: str | None = None) -> str:
        return self.name

    def output_dim(self, aux: str | None = None) -> int:
        return 3 * self.input.dim

    def lines(self) -> Lines:
        x, dim, out_dim = self.input.text, self.input.dim, 3 * self.input.dim
        return both(
            [
                f"dim-range-node name={x}_copy1 input-node={x} dim={dim} dim-offset=0",
                f"dim-range-node name={x}_copy2 input-node={x} dim={dim} dim-offset=0",
                f"component name={x}_2 type=NoOpComponent dim={out_dim}",
                f"component-node name={x}_2 component={x}_2 input=Append(Offset({x},0), "
                f"Sum(Offset(Scale(-1.0,{x}_copy1),-1), Offset({x},1)), Sum(Offset({x},-2), Offset({x},2), "
                f"Offset(Scale(-2.0,{x}_copy2),0)))",
                f"component name={self.name} type=BatchNormComponent dim={out_dim}",
                f"component-node name={self.name} component={self.name} input={x}_2",
            ]
        )


@layer_types("spec-augment-layer")
class XSpecAugment(XLayer):
    """SpecAugment: a random frequency mask, then random time masks (both the identity in test mode)."""

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {
            "input": "[-1]",
            "freq-max-proportion": 0.5,
            "time-zeroed-proportion": 0.2,
            "time-mask-max-frames": 20,
            "include-in-init": False,
        }

    def check(self) -> None:
        c = self.config
        self.require(
            0.0 < c["freq-max-proportion"] < 1.0, "freq-max-proportion must be in (0, 1)", "freq-max-proportion"
        )
        self.require(
            0.0 < c["time-zeroed-proportion"] < 1.0,
            "time-zeroed-proportion must be in (0, 1)",
            "time-zeroed-proportion",
        )
        self.require(c["time-mask-max-frames"] >= 1, "time-mask-max-frames must be >= 1", "time-mask-max-frames")

    def output_name(self, aux: str | None = None) -> str:
        return f"{self.name}.time-mask"

    def output_dim(self, aux: str | None = None) -> int:
        return self.input.dim

    def lines(self) -> Lines:
        c, name, dim = self.config, self.name, self.input.dim
        texts = [
            f"component name={name}.freq-mask type=GeneralDropoutComponent dim={dim} "
            f"specaugment-max-proportion={fmt(c['freq-max-proportion'])}",
            f"component-node name={name}.freq-mask component={name}.freq-mask input={self.input.text}",
            f"component name={name}.time-mask type=SpecAugmentTimeMaskComponent dim={dim} "
            f"zeroed-proportion={fmt(c['time-zeroed-proportion'])} time-mask-max-frames={c['time-mask-max-frames']}",
            f"component-node name={name}.time-mask component={name}.time-mask input={name}.freq-mask",
        ]
        names = ("ref", "final", "init") if c["include-in-init"] else ("ref", "final")
        return [(names, text) for text in texts]
