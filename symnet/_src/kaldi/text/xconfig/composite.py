"""Composite xconfig layers (steps/libs/nnet3/xconfig/composite_layers.py): TDNN-F and the prefinal layer.

`tdnnf-layer name=tdnnf2 dim=1536 bottleneck-dim=160 time-stride=3` is a
factorised TDNN layer with a bypass connection:

    tdnnf2.linear    TdnnComponent, input-dim -> bottleneck-dim, no bias, time-offsets=-3,0,
                     floating orthonormal constraint (-1.0)
    tdnnf2.affine    TdnnComponent, bottleneck-dim -> dim, time-offsets=0,3
    tdnnf2.relu, tdnnf2.batchnorm
    tdnnf2.dropout   GeneralDropoutComponent, continuous, only with dropout-proportion
    tdnnf2.noop      NoOpComponent of Sum(Scale(bypass-scale, input), the above), unless bypass-scale=0

`context=left-only` (time-offsets 0 in the second), `shift-left` (-3,0 in
both) or `none` (no splicing), `time-stride=0` (no splicing) change the
offsets. `prefinal-layer` is affine (input -> big-dim), ReLU, batch-norm,
linear (big-dim -> small-dim, floating orthonormal constraint), batch-norm.
"""

from __future__ import annotations

from typing import Any

from .base import Lines, XLayer, both, fmt, layer_types

__all__ = ["XPrefinal", "XTdnnf"]


@layer_types("tdnnf-layer")
class XTdnnf(XLayer):
    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {
            "input": "[-1]",
            "dim": -1,
            "bottleneck-dim": -1,
            "bypass-scale": 0.66,
            "dropout-proportion": -1.0,
            "time-stride": 1,
            "l2-regularize": 0.0,
            "max-change": 0.75,
            "self-repair-scale": 1.0e-05,
            "context": "default",
        }

    def derive(self) -> None:
        pass

    def check(self) -> None:
        c = self.config
        self.require(c["bottleneck-dim"] > 0, "bottleneck-dim must be set and > 0", "bottleneck-dim")
        self.require(c["dim"] > c["bottleneck-dim"], "dim must be greater than bottleneck-dim", "dim")
        p = c["dropout-proportion"]
        self.require(p == -1.0 or 0.0 <= p < 1.0, f"invalid dropout-proportion {p}", "dropout-proportion")
        self.require(
            abs(c["bypass-scale"]) <= 1.0, f"bypass-scale has invalid value {c['bypass-scale']}", "bypass-scale"
        )
        self.require(
            c["dim"] == self.input.dim or c["bypass-scale"] == 0.0,
            f"bypass-scale is nonzero but dim != input dim: {c['dim']} != {self.input.dim}",
            "dim",
        )
        self.require(
            c["context"] in ("default", "left-only", "shift-left", "none"),
            f"context must be default, left-only, shift-left or none, got {c['context']}",
            "context",
        )

    def output_name(self, aux: str | None = None) -> str:
        c = self.config
        last = "noop" if c["bypass-scale"] != 0.0 else "dropout" if c["dropout-proportion"] != -1.0 else "batchnorm"
        return f"{self.name}.{last}"

    def output_dim(self, aux: str | None = None) -> int:
        return self.config["dim"]

    def time_offsets(self) -> tuple[str, str]:
        """The time-offsets of the linear and the affine TdnnComponent."""
        stride, context = self.config["time-stride"], self.config["context"]
        if stride == 0 or context == "none":
            return "0", "0"
        second = {"default": f"0,{stride}", "shift-left": f"{-stride},0", "left-only": "0"}[context]
        return f"{-stride},0", second

    def lines(self) -> Lines:
        c, name = self.config, self.name
        first, second = self.time_offsets()
        l2, change = fmt(c["l2-regularize"]), fmt(c["max-change"])
        out = [
            f"component name={name}.linear type=TdnnComponent input-dim={self.input.dim} "
            f"output-dim={c['bottleneck-dim']} l2-regularize={l2} max-change={change} use-bias=false "
            f"time-offsets={first} orthonormal-constraint=-1.0",
            f"component-node name={name}.linear component={name}.linear input={self.input.text}",
            f"component name={name}.affine type=TdnnComponent input-dim={c['bottleneck-dim']} output-dim={c['dim']} "
            f"l2-regularize={l2} max-change={change} time-offsets={second}",
            f"component-node name={name}.affine component={name}.affine input={name}.linear",
            f"component name={name}.relu type=RectifiedLinearComponent dim={c['dim']} "
            f"self-repair-scale={fmt(c['self-repair-scale'])}",
            f"component-node name={name}.relu component={name}.relu input={name}.affine",
            f"component name={name}.batchnorm type=BatchNormComponent dim={c['dim']}",
            f"component-node name={name}.batchnorm component={name}.batchnorm input={name}.relu",
        ]
        last = "batchnorm"
        if c["dropout-proportion"] != -1:
            out += [
                f"component name={name}.dropout type=GeneralDropoutComponent dim={c['dim']} "
                f"dropout-proportion={fmt(c['dropout-proportion'])} continuous=true",
                f"component-node name={name}.dropout component={name}.dropout input={name}.batchnorm",
            ]
            last = "dropout"
        if c["bypass-scale"] != 0.0:
            out += [
                f"component name={name}.noop type=NoOpComponent dim={c['dim']}",
                f"component-node name={name}.noop component={name}.noop "
                f"input=Sum(Scale({fmt(c['bypass-scale'])}, {self.input.text}), {name}.{last})",
            ]
        return both(out)


@layer_types("prefinal-layer")
class XPrefinal(XLayer):
    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {
            "input": "[-1]",
            "big-dim": -1,
            "small-dim": -1,
            "l2-regularize": 0.0,
            "max-change": 0.75,
            "self-repair-scale": 1.0e-05,
        }

    def derive(self) -> None:
        pass

    def check(self) -> None:
        c = self.config
        self.require(c["small-dim"] > 0, "small-dim must be set and > 0", "small-dim")
        self.require(c["big-dim"] > c["small-dim"], "big-dim must be greater than small-dim", "big-dim")

    def output_name(self, aux: str | None = None) -> str:
        return f"{self.name}.batchnorm2"

    def output_dim(self, aux: str | None = None) -> int:
        return self.config["small-dim"]

    def lines(self) -> Lines:
        c, name = self.config, self.name
        big, small = c["big-dim"], c["small-dim"]
        l2, change = fmt(c["l2-regularize"]), fmt(c["max-change"])
        return both(
            [
                f"component name={name}.affine type=NaturalGradientAffineComponent input-dim={self.input.dim} "
                f"output-dim={big} l2-regularize={l2} max-change={change}",
                f"component-node name={name}.affine component={name}.affine input={self.input.text}",
                f"component name={name}.relu type=RectifiedLinearComponent dim={big} "
                f"self-repair-scale={fmt(c['self-repair-scale'])}",
                f"component-node name={name}.relu component={name}.relu input={name}.affine",
                f"component name={name}.batchnorm1 type=BatchNormComponent dim={big}",
                f"component-node name={name}.batchnorm1 component={name}.batchnorm1 input={name}.relu",
                f"component name={name}.linear type=LinearComponent input-dim={big} output-dim={small} "
                f"l2-regularize={l2} max-change={change} orthonormal-constraint=-1 ",
                f"component-node name={name}.linear component={name}.linear input={name}.batchnorm1",
                f"component name={name}.batchnorm2 type=BatchNormComponent dim={small}",
                f"component-node name={name}.batchnorm2 component={name}.batchnorm2 input={name}.linear",
            ]
        )
