"""Kaldi's xconfig statistics layer (steps/libs/nnet3/xconfig/stats_layer.py).

`stats-layer name=stats config=mean+stddev(-99:3:9:99)`: a
StatisticsExtractionComponent (every `3` frames) and a
StatisticsPoolingComponent (means, and standard deviations, over -99..99,
every `9` frames); the layer's output is `Round(stats-pooling-99-99, 9)`.
`config` is `mean`, `mean+stddev`, `mean+count` or `mean+stddev+count`
(`count`: a log-count feature) with `(left:input-period:stats-period:right)`.

The output dim is the input dim times 1 (mean) or 2 (with stddev), plus 1
with `count`; a zero left or right context is allowed (`mean+stddev(0:1:1:10000)`,
the x-vector recipes).
"""

from __future__ import annotations

import re
from typing import Any

from ....base.text import clip
from .base import Lines, XLayer, both, layer_types

__all__ = ["XStats"]

_CONFIG = re.compile(r"(mean|mean\+stddev|mean\+count|mean\+stddev\+count)\((-?\d+):(-?\d+):(-?\d+):(-?\d+)\)")


@layer_types("stats-layer")
class XStats(XLayer):
    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {"input": "[-1]", "dim": -1, "config": ""}

    def derive(self) -> None:
        text = self.config["config"]
        match = _CONFIG.search(text)
        if match is None:
            raise self.error(
                f"config={clip(text)!r} is not a statistics configuration like mean+stddev(-99:3:9:99)", "config"
            )
        kind = match.group(1)
        self.stddev = "stddev" in kind
        self.count = "count" in kind
        self.left = -int(match.group(2))
        self.input_period, self.stats_period = int(match.group(3)), int(match.group(4))
        self.right = int(match.group(5))
        dim = self.input.dim * (2 if self.stddev else 1) + (1 if self.count else 0)
        self.require(
            self.config["dim"] <= 0 or self.config["dim"] == dim,
            f"dim={self.config['dim']} is not the output dim {dim}",
            "dim",
        )
        self.config["dim"] = dim

    def check(self) -> None:
        ok = (
            self.left >= 0
            and self.right >= 0
            and self.input_period > 0
            and self.stats_period > 0
            and self.left % self.stats_period == 0
            and self.right % self.stats_period == 0
            and self.stats_period % self.input_period == 0
        )
        self.require(ok, f"invalid statistics configuration {self.config['config']}", "config")

    @property
    def suffix(self) -> str:
        return f"{self.left}-{self.right}"

    def output_name(self, aux: str | None = None) -> str:
        return f"Round({self.name}-pooling-{self.suffix}, {self.stats_period})"

    def output_dim(self, aux: str | None = None) -> int:
        return self.config["dim"]

    def lines(self) -> Lines:
        n, s, dim = self.name, self.suffix, self.input.dim
        variance = "true" if self.stddev else "false"
        stats_dim = 1 + dim * (2 if self.stddev else 1)
        return both(
            [
                f"component name={n}-extraction-{s} type=StatisticsExtractionComponent input-dim={dim} "
                f"input-period={self.input_period} output-period={self.stats_period} include-variance={variance} ",
                f"component-node name={n}-extraction-{s} component={n}-extraction-{s} input={self.input.text} ",
                f"component name={n}-pooling-{s} type=StatisticsPoolingComponent input-dim={stats_dim} "
                f"input-period={self.stats_period} left-context={self.left} right-context={self.right} "
                f"num-log-count-features={1 if self.count else 0} output-stddevs={variance} ",
                f"component-node name={n}-pooling-{s} component={n}-pooling-{s} input={n}-extraction-{s} ",
            ]
        )
