"""Kaldi's xconfig convolutional layers (steps/libs/nnet3/xconfig/convolution.py).

- `conv-relu-batchnorm-layer` and the other names of the family: the
  operations the name lists, in order (`conv`: a TimeHeightConvolutionComponent;
  `relu`, `batchnorm`, `renorm`, `dropout`, `so` per filter, with
  `block-dim` = the number of filters; `noconv` at the end only skips the
  offset checks). The input is `height-in` rows of `dim / height-in` filters.
- `res-block`: relu, batch-norm, 3x3 convolution, twice, plus a bypass (by
  default through a NoOpComponent, `bypass-source=noop`), or the bottleneck
  version with `num-bottleneck-filters`.
- `res2-block`: convolution, batch-norm, scale-and-offset, relu, twice (three
  times with a bottleneck), the last relu taking the sum with the bypass
  (a 1x1 convolution when the height or the number of filters changes).
- `channel-average-layer`: a SumBlockComponent averaging blocks of `dim`.
"""

from __future__ import annotations

from typing import Any

from .base import Lines, XLayer, both, fmt, layer_types

__all__ = ["XChannelAverage", "XConv", "XRes2Block", "XResBlock"]

_CONV_PASSED = (
    "param-stddev",
    "bias-stddev",
    "use-natural-gradient",
    "max-change",
    "rank-in",
    "rank-out",
    "num-minibatches-history",
    "alpha-in",
    "alpha-out",
)


def _options(config: dict[str, Any], keys: tuple[str, ...]) -> list[str]:
    return [f"{key}={fmt(config[key])}" for key in keys if config[key] != ""]


def _offsets_ok(text: str) -> bool:
    """A sorted list of distinct integers, like -1,0,1."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        return False
    return bool(values) and all(a < b for a, b in zip(values, values[1:]))


@layer_types(
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
)
class XConv(XLayer):
    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {
            "input": "[-1]",
            "height-in": -1,
            "height-subsample-out": 1,
            "height-out": -1,
            "height-offsets": "",
            "num-filters-out": -1,
            "time-offsets": "",
            "required-time-offsets": "",
            "target-rms": 1.0,
            "self-repair-scale": 2.0e-05,
            "self-repair-lower-threshold": 0.05,
            "param-stddev": "",
            "bias-stddev": "",
            "max-change": 0.75,
            "learning-rate-factor": "",
            "use-natural-gradient": "",
            "rank-in": "",
            "rank-out": "",
            "num-minibatches-history": "",
            "alpha-in": "",
            "alpha-out": "",
            "l2-regularize": "",
            "dropout-proportion": 0.5,
        }

    @property
    def operations(self) -> list[str]:
        ops = self.layer_type.split("-")[:-1]
        return ops[:-1] if ops[-1] == "noconv" else ops

    def derive(self) -> None:
        height_in, dim = self.config["height-in"], self.input.dim
        self.require(height_in > 0, "height-in must be specified", "height-in")
        self.require(
            dim % height_in == 0, f"the input dim {dim} is not a multiple of height-in={height_in}", "height-in"
        )
        self.config["num-filters-in"] = dim // height_in

    def check(self) -> None:
        c = self.config
        subsample, height_in, height_out = c["height-subsample-out"], c["height-in"], c["height-out"]
        self.require(subsample > 0, f"height-subsample-out has invalid value {subsample}", "height-subsample-out")
        self.require(height_out > 0, f"height-out has invalid value {height_out}", "height-out")
        self.require(
            height_out * subsample <= height_in,
            f"height-in={height_in}, height-out={height_out} and height-subsample-out={subsample} do not "
            "fit (height-out too large)",
            "height-out",
        )
        if "noconv" not in self.layer_type.split("-"):
            for key in ("height-offsets", "time-offsets"):
                self.require(_offsets_ok(c[key]), f"{key}={c[key]} is not valid", key)
            self.require(
                c["required-time-offsets"] == "" or _offsets_ok(c["required-time-offsets"]),
                f"required-time-offsets={c['required-time-offsets']} is not valid",
                "required-time-offsets",
            )
        self.require(
            height_out * subsample >= height_in - len(c["height-offsets"].split(",")),
            f"height-in={height_in}, height-out={height_out}, height-subsample-out={subsample} and "
            f"height-offsets={c['height-offsets']} do not fit (height-out too small)",
            "height-out",
        )
        self.require(c["target-rms"] > 0.0, f"target-rms={c['target-rms']} is not valid", "target-rms")

    def output_name(self, aux: str | None = None) -> str:
        return f"{self.name}.{self.operations[-1]}"

    def output_dim(self, aux: str | None = None) -> int:
        return self.config["num-filters-out"] * self.config["height-out"]

    def lines(self) -> Lines:
        c, n = self.config, self.name
        filters, height, node = c["num-filters-in"], c["height-in"], self.input.text
        out: list[str] = []
        for op in self.operations:
            dim = filters * height
            if op == "conv":
                options = " ".join(
                    _options(
                        c,
                        _CONV_PASSED
                        + (
                            "num-filters-in",
                            "num-filters-out",
                            "height-in",
                            "height-out",
                            "height-subsample-out",
                            "height-offsets",
                            "time-offsets",
                            "required-time-offsets",
                            "learning-rate-factor",
                            "l2-regularize",
                        ),
                    )
                )
                out.append(f"component name={n}.conv type=TimeHeightConvolutionComponent {options}")
                filters, height = c["num-filters-out"], c["height-out"]
            elif op == "batchnorm":
                out.append(
                    f"component name={n}.batchnorm  type=BatchNormComponent dim={dim} block-dim={filters} "
                    f"target-rms={fmt(c['target-rms'])}"
                )
            elif op == "renorm":
                out.append(
                    f"component name={n}.renorm type=NormalizeComponent dim={dim} target-rms={fmt(c['target-rms'])}"
                )
            elif op == "relu":
                out.append(
                    f"component name={n}.relu type=RectifiedLinearComponent dim={dim} block-dim={filters} "
                    f"self-repair-scale={fmt(c['self-repair-scale'])} "
                    f"self-repair-lower-threshold={fmt(c['self-repair-lower-threshold'])}"
                )
            elif op == "dropout":
                out.append(
                    f"component name={n}.dropout type=DropoutComponent dim={dim} "
                    f"dropout-proportion={fmt(c['dropout-proportion'])}"
                )
            elif op == "so":
                out.append(f"component name={n}.so type=ScaleAndOffsetComponent dim={dim} block-dim={filters}")
            else:
                raise self.error(f"unknown operation {op!r}")
            out.append(f"component-node name={n}.{op} component={n}.{op} input={node}")
            node = f"{n}.{op}"
        return both(out)


_RES_DEFAULTS = {
    "time-period": 1,
    "self-repair-scale": 2.0e-05,
    "self-repair-lower-threshold1": 0.05,
    "self-repair-lower-threshold2": 0.05,
    "self-repair-lower-threshold3": 0.05,
    "max-change": 0.75,
    "allow-zero-padding": True,
    "param-stddev": "",
    "bias-stddev": "",
    "use-natural-gradient": "",
    "rank-in": "",
    "rank-out": "",
    "num-minibatches-history": "",
    "alpha-in": "",
    "alpha-out": "",
    "l2-regularize": "",
}


class XResidual(XLayer):
    """What res-block and res2-block share: the relu line and the pass-through convolution options."""

    def relu(self, n: int, dim: int, filters: int) -> str:
        c = self.config
        return (
            f"component name={self.name}.relu{n} type=RectifiedLinearComponent dim={dim} block-dim={filters} "
            f"self-repair-scale={fmt(c['self-repair-scale'])} "
            f"self-repair-lower-threshold={fmt(c[f'self-repair-lower-threshold{n}'])}"
        )

    @property
    def conv_options(self) -> str:
        return " ".join(_options(self.config, _CONV_PASSED + ("l2-regularize",)))

    @property
    def padding(self) -> str:
        return "required-time-offsets=0" if self.config["allow-zero-padding"] else ""

    def node(self, component: str, source: str) -> str:
        return f"component-node name={self.name}.{component} component={self.name}.{component} input={source}"


@layer_types("res-block")
class XResBlock(XResidual):
    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {
            "input": "[-1]",
            "height": -1,
            "num-filters": -1,
            "num-bottleneck-filters": -1,
            "height-period": 1,
            "bypass-source": "noop",
            **_RES_DEFAULTS,
        }

    def derive(self) -> None:
        c, dim = self.config, self.input.dim
        self.require(c["height"] > 0, "height must be specified", "height")
        if c["num-filters"] == -1:
            self.require(
                dim % c["height"] == 0, f"the height {c['height']} does not divide the input dim {dim}", "height"
            )
            c["num-filters"] = dim // c["height"]
        else:
            self.require(
                dim == c["num-filters"] * c["height"],
                f"expected the input dim to be height={c['height']} * num-filters={c['num-filters']} = "
                f"{c['height'] * c['num-filters']}, but it is {dim}",
                "num-filters",
            )

    def check(self) -> None:
        self.require(
            self.config["bypass-source"] in ("input", "noop", "relu", "batchnorm"),
            f"bypass-source must be input, noop, relu or batchnorm, got {self.config['bypass-source']}",
            "bypass-source",
        )

    def output_name(self, aux: str | None = None) -> str:
        conv = f"{self.name}.conv2" if self.config["num-bottleneck-filters"] <= 0 else f"{self.name}.conv3"
        residual = {"input": self.input.text, "relu": f"{self.name}.relu1", "batchnorm": f"{self.name}.batchnorm1"}.get(
            self.config["bypass-source"]
        )
        return f"{self.name}.noop" if residual is None else f"Sum({conv}, {residual})"

    def output_dim(self, aux: str | None = None) -> int:
        return self.input.dim

    def lines(self) -> Lines:
        c, name = self.config, self.name
        height, filters, bottleneck = c["height"], c["num-filters"], c["num-bottleneck-filters"]
        steps = (1, 2) if bottleneck <= 0 else (1, 2, 3)
        out: list[str] = []
        node, current = self.input.text, filters
        for n in steps:
            out += [self.relu(n, current * height, current), self.node(f"relu{n}", node)]
            out += [
                f"component name={name}.batchnorm{n}  type=BatchNormComponent dim={current * height} "
                f"block-dim={current}",
                self.node(f"batchnorm{n}", f"{name}.relu{n}"),
            ]
            p, hp = c["time-period"], c["height-period"]
            spliced = bottleneck <= 0 or n == 2
            offsets = (
                f"height-offsets=-{hp},0,{hp} time-offsets=-{p},0,{p}" if spliced else "height-offsets=0 time-offsets=0"
            )
            following = filters if bottleneck <= 0 or n == 3 else bottleneck
            out.append(
                f"component name={name}.conv{n} type=TimeHeightConvolutionComponent height-in={height} "
                f"height-out={height} {offsets} num-filters-in={current} num-filters-out={following} "
                f"{self.padding} {self.conv_options}"
            )
            out.append(self.node(f"conv{n}", f"{name}.batchnorm{n}"))
            node, current = f"{name}.conv{n}", following
        if c["bypass-source"] == "noop":
            out += [
                f"component name={name}.noop dim={self.input.dim} type=NoOpComponent",
                self.node("noop", f"Sum({self.input.text}, {name}.conv{steps[-1]})"),
            ]
        return both(out)


@layer_types("res2-block")
class XRes2Block(XResidual):
    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {
            "input": "[-1]",
            "height": -1,
            "height-in": -1,
            "height-out": -1,
            "num-filters": -1,
            "num-bottleneck-filters": -1,
            **_RES_DEFAULTS,
        }

    def derive(self) -> None:
        c = self.config
        given = (c["height"] > 0 and c["height-in"] == -1 and c["height-out"] == -1) or (
            c["height-in"] > 0 and c["height-out"] > 0
        )
        self.require(given, "give height, or height-in and height-out", "height")
        if not (c["height-in"] > 0 and c["height-out"] > 0):
            c["height-in"] = c["height-out"] = c["height"]
        self.require(
            self.input.dim % c["height-in"] == 0,
            f"the input height {c['height-in']} does not divide the input dim {self.input.dim}",
            "height-in",
        )

    def check(self) -> None:
        self.require(self.config["num-filters"] != -1, "num-filters must be specified", "num-filters")

    def output_name(self, aux: str | None = None) -> str:
        return f"{self.name}.relu{2 if self.config['num-bottleneck-filters'] <= 0 else 3}"

    def output_dim(self, aux: str | None = None) -> int:
        return self.config["height-out"] * self.config["num-filters"]

    def lines(self) -> Lines:
        c, name = self.config, self.name
        height_in, height_out, bottleneck = c["height-in"], c["height-out"], c["num-bottleneck-filters"]
        filters_in, filters_out = self.input.dim // height_in, c["num-filters"]
        period_out = c["time-period"]
        if height_out != height_in:
            self.require(
                height_in / 2 - 1 <= height_out <= height_in / 2 + 1,
                f"height-out={height_out} must be about half height-in={height_in}, or the same",
                "height-out",
            )
            subsample = 2
            if bottleneck <= 0:
                self.require(
                    period_out % 2 == 0,
                    "time-period must be a multiple of 2 when subsampling the height",
                    "time-period",
                )
        else:
            subsample = 1
        period = period_out // 2 if subsample == 2 and bottleneck <= 0 else period_out
        x = self.input.text
        bypass = x if subsample == 1 and filters_in == filters_out else f"{name}.conv_bypass"
        steps = (1, 2) if bottleneck <= 0 else (1, 2, 3)
        out: list[str] = []
        node, filters, height = x, filters_in, height_in
        for n in steps:
            if bottleneck <= 0:
                following = filters_out
                conv = (
                    f"height-in={height} height-out={height_out} height-offsets=-1,0,1 "
                    f"height-subsample-out={subsample if n == 1 else 1} time-offsets=-{period},0,{period} "
                    f"num-filters-in={filters} num-filters-out={following} {self.padding} {self.conv_options}"
                )
            else:
                middle = n == 2
                following = filters_out if n == 3 else bottleneck
                conv = (
                    f"height-in={height} height-out={height_out} "
                    f"height-offsets={'-1,0,1' if middle else '0'} "
                    f"time-offsets={f'-{period_out},0,{period_out}' if middle else '0'} "
                    f"num-filters-in={filters} num-filters-out={following} "
                    f"height-subsample-out={subsample if n == 1 else 1} {self.padding} {self.conv_options}"
                )
            out += [
                f"component name={name}.conv{n} type=TimeHeightConvolutionComponent {conv}",
                self.node(f"conv{n}", node),
            ]
            filters, height, period = following, height_out, period_out
            dim = filters * height
            out += [
                f"component name={name}.batchnorm{n}  type=BatchNormComponent dim={dim} block-dim={filters}",
                self.node(f"batchnorm{n}", f"{name}.conv{n}"),
                f"component name={name}.scaleoffset{n}  type=ScaleAndOffsetComponent dim={dim} block-dim={filters}",
                self.node(f"scaleoffset{n}", f"{name}.batchnorm{n}"),
            ]
            node = f"{name}.scaleoffset{n}"
            if n == steps[-1]:
                node = f"Sum({node}, {bypass})"
            out += [self.relu(n, dim, filters), self.node(f"relu{n}", node)]
            node = f"{name}.relu{n}"
        if bypass != x:
            out += [
                f"component name={name}.conv_bypass type=TimeHeightConvolutionComponent height-in={height_in} "
                f"height-out={height_out} height-offsets=0 time-offsets=0 height-subsample-out={subsample} "
                f"num-filters-in={filters_in} num-filters-out={filters_out} {self.conv_options}",
                self.node("conv_bypass", x),
            ]
        return both(out)


@layer_types("channel-average-layer")
class XChannelAverage(XLayer):
    """`channel-average-layer name=channel-average input=Append(2, 4, 6, 8) dim=64`: the mean of dim-sized blocks."""

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {"input": "[-1]", "dim": -1}

    def derive(self) -> None:
        pass

    def check(self) -> None:
        dim = self.config["dim"]
        self.require(dim > 0, "dim must be specified and > 0", "dim")
        self.require(self.input.dim % dim == 0, f"the input dim {self.input.dim} is not a multiple of dim={dim}", "dim")

    def output_name(self, aux: str | None = None) -> str:
        return self.name

    def output_dim(self, aux: str | None = None) -> int:
        return self.config["dim"]

    def lines(self) -> Lines:
        dim = self.config["dim"]
        return both(
            [
                f"component name={self.name} type=SumBlockComponent input-dim={self.input.dim} "
                f"output-dim={dim} scale={fmt(dim * 1.0 / self.input.dim)}",
                f"component-node name={self.name} component={self.name} input={self.input.text}",
            ]
        )
