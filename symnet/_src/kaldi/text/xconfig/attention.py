"""Kaldi's xconfig attention layers (steps/libs/nnet3/xconfig/attention.py).

`attention-relu-renorm-layer name=attention1 num-heads=10 value-dim=50
key-dim=50 time-stride=3 num-left-inputs=5 num-right-inputs=2`: an affine
component to the keys, values and queries of every head, then the components
the name lists (`attention`: a RestrictedAttentionComponent; `relu`,
`sigmoid`, `tanh`, `renorm`, `batchnorm`, `dropout`).
"""

from __future__ import annotations

import math
from typing import Any

from .base import Lines, XLayer, both, fmt, layer_types

__all__ = ["XAttention"]


@layer_types(
    "attention-renorm-layer",
    "attention-relu-renorm-layer",
    "attention-relu-batchnorm-layer",
    "relu-renorm-attention-layer",
)
class XAttention(XLayer):
    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {
            "input": "[-1]",
            "dim": -1,
            "max-change": 0.75,
            "self-repair-scale": 1.0e-05,
            "target-rms": 1.0,
            "learning-rate-factor": 1.0,
            "ng-affine-options": "",
            "l2-regularize": 0.0,
            "num-left-inputs-required": -1,
            "num-right-inputs-required": -1,
            "output-context": True,
            "time-stride": 1,
            "num-heads": 1,
            "key-dim": -1,
            "key-scale": 0.0,
            "value-dim": -1,
            "num-left-inputs": -1,
            "num-right-inputs": -1,
            "dropout-proportion": 0.5,
        }

    def check(self) -> None:
        c = self.config
        self.require(
            0.0 <= c["self-repair-scale"] <= 1.0,
            f"self-repair-scale has invalid value {c['self-repair-scale']}",
            "self-repair-scale",
        )
        self.require(c["target-rms"] >= 0.0, f"target-rms has invalid value {c['target-rms']}", "target-rms")
        self.require(
            c["learning-rate-factor"] > 0.0,
            f"learning-rate-factor has invalid value {c['learning-rate-factor']}",
            "learning-rate-factor",
        )
        for key in ("value-dim", "key-dim", "num-left-inputs", "num-right-inputs"):
            self.require(c[key] >= 0, f"{key} must be set (>= 0), got {c[key]}", key)
        if c["key-scale"] == 0.0:  # Kaldi's default, worked out in its check_configs: 1/sqrt(key-dim)
            self.require(c["key-dim"] > 0, "key-dim must be positive when key-scale is not given", "key-dim")
            c["key-scale"] = 1.0 / math.sqrt(c["key-dim"])

    @property
    def operations(self) -> list[str]:
        return self.layer_type.split("-")[:-1]

    def output_name(self, aux: str | None = None) -> str:
        return f"{self.name}.{self.operations[-1]}"

    def attention_input_dim(self) -> int:
        c = self.config
        context = c["num-left-inputs"] + c["num-right-inputs"] + 1
        return c["num-heads"] * (2 * c["key-dim"] + c["value-dim"] + context)

    def output_dim(self, aux: str | None = None) -> int:
        c = self.config
        context = c["num-left-inputs"] + c["num-right-inputs"] + 1
        return c["num-heads"] * (c["value-dim"] + (context if c["output-context"] else 0))

    def lines(self) -> Lines:
        c, n = self.config, self.name
        dim = self.attention_input_dim()
        factor, l2 = c["learning-rate-factor"], c["l2-regularize"]
        rate = f"learning-rate-factor={fmt(factor)}" if factor != 1.0 else ""
        l2_option = f"l2-regularize={fmt(l2)} " if l2 != 0.0 else ""
        out = [
            f"component name={n}.affine type=NaturalGradientAffineComponent input-dim={self.input.dim} "
            f"output-dim={dim} max-change={fmt(c['max-change'])} {c['ng-affine-options']} {rate} {l2_option}",
            f"component-node name={n}.affine component={n}.affine input={self.input.text}",
        ]
        node = f"{n}.affine"
        repair, rms = fmt(c["self-repair-scale"]), fmt(c["target-rms"])
        for op in self.operations:
            head = f"component name={n}.{op}"
            if op == "relu":
                line = f"{head} type=RectifiedLinearComponent dim={dim} self-repair-scale={repair}"
            elif op == "attention":
                line = (
                    f"{head} type=RestrictedAttentionComponent value-dim={c['value-dim']} key-dim={c['key-dim']} "
                    f"num-left-inputs={c['num-left-inputs']} num-right-inputs={c['num-right-inputs']} "
                    f"num-left-inputs-required={c['num-left-inputs-required']} "
                    f"num-right-inputs-required={c['num-right-inputs-required']} "
                    f"output-context={fmt(c['output-context'])} time-stride={c['time-stride']} "
                    f"num-heads={c['num-heads']} key-scale={fmt(c['key-scale'])}"
                )
                dim = self.output_dim()
            elif op == "sigmoid":
                line = f"{head} type=SigmoidComponent dim={dim} self-repair-scale={repair}"
            elif op == "tanh":
                line = f"{head} type=TanhComponent dim={dim} self-repair-scale={repair}"
            elif op == "renorm":
                line = f"{head} type=NormalizeComponent dim={dim} target-rms={rms}"
            elif op == "batchnorm":
                line = f"{head} type=BatchNormComponent dim={dim} target-rms={rms}"
            elif op == "dropout":
                line = f"{head} type=DropoutComponent dim={dim} dropout-proportion={fmt(c['dropout-proportion'])}"
            else:
                raise self.error(f"unknown nonlinearity type {op!r}")
            out += [line, f"component-node name={n}.{op} component={n}.{op} input={node}"]
            node = f"{n}.{op}"
        return both(out)
