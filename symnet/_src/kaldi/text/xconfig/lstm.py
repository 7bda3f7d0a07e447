"""Kaldi's xconfig LSTM layers (steps/libs/nnet3/xconfig/lstm.py).

- `lstm-layer`: the LSTM of Sak et al. from affine, per-element-scale
  (peephole), sigmoid, tanh and elementwise-product components; output
  `name.m_t`, auxiliary `name.c_t`.
- `lstmp-layer` (`lstmp-batchnorm-layer`): the same with a recurrent and a
  non-recurrent projection; output `name.rp_t` (`name.rp_t_batchnorm`).
- `fast-lstm-layer` (`fast-lstm-batchnorm-layer`): one affine `W_all` and an
  LstmNonlinearityComponent; output `name.m` (`name.m_batchnorm`), auxiliary
  `name.c` (a node symnet writes when a later layer uses it; Kaldi's script
  refers to it but leaves it out).
- `fast-lstmp-layer` (`fast-lstmp-batchnorm-layer`): the projected fast LSTM;
  output `name.rp` (`name.rp_batchnorm`), auxiliary `name.c` (Kaldi's
  script names it `c_t`, but its node is `c`).
- `lstmb-layer`: the fast LSTM with `W_all` factorised through a bottleneck
  (orthonormal first factor), a ScaleAndOffsetComponent and batch-norm;
  output `name.m_batchnorm`.

The recurrence is `IfDefined(Offset(..., delay))` through
BackpropTruncationComponents (`clipping-threshold`, `zeroing-threshold`,
`zeroing-interval`, `recurrence-interval=|delay|`, and `scale=1-|delay|/decay-time`
when `decay-time` is set).
"""

from __future__ import annotations

import re
from typing import Any

from .base import Lines, XLayer, both, fmt, layer_types

__all__ = ["XFastLstm", "XFastLstmp", "XLstm", "XLstmb", "XLstmp", "truncation_options"]


def truncation_options(config: dict[str, Any], scale: bool = True) -> str:
    """The BackpropTruncationComponent options of a recurrent layer."""
    delay = config["delay"]
    text = (
        f"clipping-threshold={fmt(config['clipping-threshold'])} "
        f"zeroing-threshold={fmt(config['zeroing-threshold'])} "
        f"zeroing-interval={config['zeroing-interval']} recurrence-interval={abs(delay)}"
    )
    if scale:
        decay = config["decay-time"]
        text += f" scale={fmt(1.0 if decay < 0 else 1.0 - abs(delay) / decay)}"
    return text


def per_element_scale_options(config: dict[str, Any]) -> str:
    """ng-per-element-scale-options, with Kaldi's peephole initialisation unless it sets one."""
    text = config["ng-per-element-scale-options"]
    if re.search("param-mean", text) is None and re.search("param-stddev", text) is None:
        text += " param-mean=0.0 param-stddev=1.0 "
    return text


def l2_option(config: dict[str, Any]) -> str:
    value = config["l2-regularize"]
    return f"l2-regularize={fmt(value)} " if value != 0.0 else ""


class XRecurrent(XLayer):
    """What the LSTM (and GRU) layers share: cell-dim, delay, the checks of both."""

    projected = False

    def derive(self) -> None:
        c = self.config
        if not self.projected:
            if c["cell-dim"] <= 0:
                c["cell-dim"] = self.input.dim
            return
        if c["recurrent-projection-dim"] <= 0:  # Kaldi's cell-dim / 4, an integer in the Python 2 it was written for
            c["recurrent-projection-dim"] = c["cell-dim"] // 4
        if c["non-recurrent-projection-dim"] <= 0:
            c["non-recurrent-projection-dim"] = c["recurrent-projection-dim"]

    def check(self) -> None:
        c = self.config
        keys = (
            ("cell-dim", "recurrent-projection-dim", "non-recurrent-projection-dim")
            if self.projected
            else ("cell-dim",)
        )
        for key in keys:
            self.require(c[key] > 0, f"{key} has invalid value {c[key]}", key)
        self.require(c["delay"] != 0, "delay cannot be zero", "delay")
        if self.projected:
            self.require(
                c["recurrent-projection-dim"] + c["non-recurrent-projection-dim"] <= c["cell-dim"],
                "recurrent+non-recurrent projection dim exceeds cell dim",
                "recurrent-projection-dim",
            )
        if "self-repair-scale-nonlinearity" in c:
            value = c["self-repair-scale-nonlinearity"]
            self.require(
                0.0 <= value <= 1.0,
                f"self-repair-scale-nonlinearity has invalid value {value}",
                "self-repair-scale-nonlinearity",
            )
        if "decay-time" in c and c["decay-time"] >= 0:
            decay = c["decay-time"]
            self.require(
                decay > abs(c["delay"]), f"decay-time={decay} is too small for delay={c['delay']}", "decay-time"
            )
        if "dropout-proportion" in c:
            p = c["dropout-proportion"]
            self.require(
                p == -1.0 or 0.0 <= p <= 1.0, f"dropout-proportion has invalid value {p}", "dropout-proportion"
            )

    def output_dim(self, aux: str | None = None) -> int:
        c = self.config
        if aux is not None or not self.projected:
            return c["cell-dim"]
        return c["recurrent-projection-dim"] + c["non-recurrent-projection-dim"]

    @property
    def repair(self) -> str:
        return f"self-repair-scale={self.config['self-repair-scale-nonlinearity']:.10f}"


_SCALE_DEFAULTS = {"clipping-threshold": 30.0, "zeroing-interval": 20, "zeroing-threshold": 15.0, "delay": -1}


class XSakLstm(XRecurrent):
    """lstm-layer and lstmp-layer: the LSTM of Sak et al. from single components."""

    def cell_lines(self, recurrent_dim: int) -> list[str]:
        """The gates, the cell and m_t of the LSTM of Sak et al., whose recurrent input r_t has `recurrent_dim`
        (lstm-layer's and lstmp-layer's lines differ in a few blanks; Kaldi's are kept)."""
        c, n = self.config, self.name
        x, cell, delay = self.input.text, c["cell-dim"], c["delay"]
        affine, pes, l2 = c["ng-affine-options"], per_element_scale_options(c), l2_option(c)
        repair, projected = self.repair, self.projected
        dropout = projected and c["dropout-proportion"] != -1.0
        xr = self.input.dim + recurrent_dim
        c_prev, r_prev = f"IfDefined(Offset({n}.c_t, {delay}))", f"IfDefined(Offset({n}.r_t, {delay}))"
        scale = f"component name={n}.w_{{}}.c type=NaturalGradientPerElementScaleComponent"
        out: list[str] = []
        for gate, title, blank, end in (
            ("i", "# Input gate", " ", "" if projected else " "),
            ("f", "# Forget gate", "  " if projected else " ", ""),
            ("o", "#  Output gate", " " if projected else "  ", ""),
        ):
            out += [
                f"{title} control : W_{gate}* matrices",
                f"component name={n}.W_{gate}.xr type=NaturalGradientAffineComponent input-dim={xr} "
                f"output-dim={cell} {affine} {l2}",
                "# note : the cell outputs pass through a diagonal matrix",
                f"{scale.format(gate)}{blank}dim={cell} {pes} {l2}{end}",
            ]
        out += [
            "# Cell input matrices : W_c* matrices",
            f"component name={n}.W_c.xr type=NaturalGradientAffineComponent input-dim={xr} output-dim={cell} "
            f"{affine} {l2}",
            "# Defining the non-linearities",
        ]
        out += [f"component name={n}.{g} type=SigmoidComponent dim={cell} {repair}" for g in "ifo"]
        out += [f"component name={n}.{g} type=TanhComponent dim={cell} {repair}" for g in "gh"]
        if dropout:
            out.append(
                f"component name={n}.dropout type=DropoutComponent dim={cell} "
                f"dropout-proportion={fmt(c['dropout-proportion'])} "
                f"dropout-per-frame={'true' if c['dropout-per-frame'] else 'false'}"
            )
        out.append("# Defining the components for other cell computations")
        out += [
            f"component name={n}.{p} type=ElementwiseProductComponent input-dim={2 * cell} output-dim={cell}"
            for p in ("c1", "c2", "m")
        ]
        out.append(f"component name={n}.c type=BackpropTruncationComponent dim={cell} {truncation_options(c)}")
        out.append(f"component-node name={n}.c_t component={n}.c input=Sum({n}.c1_t, {n}.c2_t)")
        for gate, gap, peephole in (("i", "  ", c_prev), ("f", "  ", c_prev), ("o", " ", f"{n}.c_t")):
            out += [
                f"# {gate}_t",
                f"component-node name={n}.{gate}1_t component={n}.W_{gate}.xr input=Append({x}, {r_prev})",
                f"component-node name={n}.{gate}2_t component={n}.w_{gate}.c{gap}input={peephole}",
            ]
            total = f"Sum({n}.{gate}1_t, {n}.{gate}2_t)"
            if dropout:
                out += [
                    f"component-node name={n}.{gate}_t_predrop component={n}.{gate} input={total}",
                    f"component-node name={n}.{gate}_t component={n}.dropout input={n}.{gate}_t_predrop",
                ]
            else:
                out.append(f"component-node name={n}.{gate}_t component={n}.{gate} input={total}")
        out += [
            "# h_t",
            f"component-node name={n}.h_t component={n}.h input={n}.c_t",
            "# g_t",
            f"component-node name={n}.g1_t component={n}.W_c.xr input=Append({x}, {r_prev})",
            f"component-node name={n}.g_t component={n}.g input={n}.g1_t",
            "# parts of c_t",
            f"component-node name={n}.c1_t component={n}.c1  input=Append({n}.f_t, {c_prev})",
            f"component-node name={n}.c2_t component={n}.c2 input=Append({n}.i_t, {n}.g_t)",
            "# m_t",
            f"component-node name={n}.m_t component={n}.m input=Append({n}.o_t, {n}.h_t)",
        ]
        return out


@layer_types("lstm-layer")
class XLstm(XSakLstm):
    aux = ("c_t",)

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {
            "input": "[-1]",
            "cell-dim": -1,
            **_SCALE_DEFAULTS,
            "ng-per-element-scale-options": " max-change=0.75",
            "ng-affine-options": " max-change=0.75 ",
            "self-repair-scale-nonlinearity": 0.00001,
            "l2-regularize": 0.0,
            "decay-time": -1.0,
        }

    def output_name(self, aux: str | None = None) -> str:
        return f"{self.name}.{aux or 'm_t'}"

    def lines(self) -> Lines:
        c, n = self.config, self.name
        out = [f"### Begin LSTM layer '{n}'", *self.cell_lines(c["cell-dim"])]
        out += [
            f"component name={n}.r type=BackpropTruncationComponent dim={c['cell-dim']} {truncation_options(c)}",
            f"component-node name={n}.r_t component={n}.r input={n}.m_t",
            f"### End LSTM layer '{n}'",
        ]
        return both(out)


@layer_types("lstmp-layer", "lstmp-batchnorm-layer")
class XLstmp(XSakLstm):
    aux = ("c_t",)
    projected = True

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {
            "input": "[-1]",
            "cell-dim": -1,
            "recurrent-projection-dim": -1,
            "non-recurrent-projection-dim": -1,
            **_SCALE_DEFAULTS,
            "ng-per-element-scale-options": " max-change=0.75 ",
            "ng-affine-options": " max-change=0.75 ",
            "self-repair-scale-nonlinearity": 0.00001,
            "dropout-proportion": -1.0,
            "dropout-per-frame": False,
            "decay-time": -1.0,
            "l2-regularize": 0.0,
        }

    def output_name(self, aux: str | None = None) -> str:
        main = "rp_t_batchnorm" if self.layer_type == "lstmp-batchnorm-layer" else "rp_t"
        return f"{self.name}.{aux or main}"

    def lines(self) -> Lines:
        c, n = self.config, self.name
        cell, rec, nonrec = c["cell-dim"], c["recurrent-projection-dim"], c["non-recurrent-projection-dim"]
        out = self.cell_lines(rec)  # the same cell, with r_t projected
        out += [
            "# projection matrices : Wrm and Wpm",
            f"component name={n}.W_rp.m type=NaturalGradientAffineComponent input-dim={cell} "
            f"output-dim={rec + nonrec} {c['ng-affine-options']} {l2_option(c)}",
            f"component name={n}.r type=BackpropTruncationComponent dim={rec} {truncation_options(c)}",
            "# r_t and p_t : rp_t will be the output (if we're not doing batchnorm)",
            f"component-node name={n}.rp_t component={n}.W_rp.m input={n}.m_t",
            f"dim-range-node name={n}.r_t_preclip input-node={n}.rp_t dim-offset=0 dim={rec}",
            f"component-node name={n}.r_t component={n}.r input={n}.r_t_preclip",
        ]
        if self.layer_type == "lstmp-batchnorm-layer":
            out += [
                f"component name={n}.rp_t_batchnorm type=BatchNormComponent dim={rec + nonrec} ",
                f"component-node name={n}.rp_t_batchnorm component={n}.rp_t_batchnorm input={n}.rp_t",
            ]
        return both(out)


_FAST_DEFAULTS = {
    "lstm-nonlinearity-options": " max-change=0.75",
    "ng-affine-options": " max-change=1.5",
    "l2-regularize": 0.0,
    "decay-time": -1.0,
}


@layer_types("fast-lstm-layer", "fast-lstm-batchnorm-layer")
class XFastLstm(XRecurrent):
    aux = ("c",)

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {"input": "[-1]", "cell-dim": -1, **_SCALE_DEFAULTS, **_FAST_DEFAULTS}

    def output_name(self, aux: str | None = None) -> str:
        main = "m_batchnorm" if self.layer_type == "fast-lstm-batchnorm-layer" else "m"
        return f"{self.name}.{aux or main}"

    def lines(self) -> Lines:
        c, n = self.config, self.name
        cell, delay, l2 = c["cell-dim"], c["delay"], l2_option(c)
        out = [
            f"### Begin LSTM layer '{n}'",
            "# Gate control: contains W_i, W_f, W_c and W_o matrices as blocks.",
            f"component name={n}.W_all type=NaturalGradientAffineComponent input-dim={self.input.dim + cell} "
            f"output-dim={4 * cell} {c['ng-affine-options']} {l2}",
            "# The core LSTM nonlinearity, implemented as a single component.",
            "# Input = (i_part, f_part, c_part, o_part, c_{t-1}), output = (c_t, m_t)",
            "# See cu-math.h:ComputeLstmNonlinearity() for details.",
            f"component name={n}.lstm_nonlin type=LstmNonlinearityComponent cell-dim={cell} "
            f"{c['lstm-nonlinearity-options']} {l2}",
            "# Component for backprop truncation, to avoid gradient blowup in long training examples.",
            f"component name={n}.cm_trunc type=BackpropTruncationComponent dim={2 * cell} {truncation_options(c)}",
            "###  Nodes for the components above.",
            f"component-node name={n}.W_all component={n}.W_all "
            f"input=Append({self.input.text}, IfDefined(Offset({n}.m_trunc, {delay})))",
            f"component-node name={n}.lstm_nonlin component={n}.lstm_nonlin "
            f"input=Append({n}.W_all, IfDefined(Offset({n}.c_trunc, {delay})))",
        ]
        if "c" in self.used_aux:
            out.append(f"dim-range-node name={n}.c input-node={n}.lstm_nonlin dim-offset=0 dim={cell}")
        out += [
            f"dim-range-node name={n}.m input-node={n}.lstm_nonlin dim-offset={cell} dim={cell}",
            f"component-node name={n}.cm_trunc component={n}.cm_trunc input={n}.lstm_nonlin",
            f"dim-range-node name={n}.c_trunc input-node={n}.cm_trunc dim-offset=0 dim={cell}",
            f"dim-range-node name={n}.m_trunc input-node={n}.cm_trunc dim-offset={cell} dim={cell}",
        ]
        if self.layer_type == "fast-lstm-batchnorm-layer":
            out += [
                f"component name={n}.m_batchnorm type=BatchNormComponent dim={cell} ",
                f"component-node name={n}.m_batchnorm component={n}.m_batchnorm input={n}.m",
            ]
        out.append(f"### End LSTM layer '{n}'")
        return both(out)


@layer_types("fast-lstmp-layer", "fast-lstmp-batchnorm-layer")
class XFastLstmp(XRecurrent):
    aux = ("c",)
    projected = True

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {
            "input": "[-1]",
            "cell-dim": -1,
            "recurrent-projection-dim": -1,
            "non-recurrent-projection-dim": -1,
            **_SCALE_DEFAULTS,
            **_FAST_DEFAULTS,
            "dropout-proportion": -1.0,
        }

    def output_name(self, aux: str | None = None) -> str:
        main = "rp_batchnorm" if self.layer_type == "fast-lstmp-batchnorm-layer" else "rp"
        return f"{self.name}.{aux or main}"

    def lines(self) -> Lines:
        c, n = self.config, self.name
        cell, delay, l2 = c["cell-dim"], c["delay"], l2_option(c)
        rec, nonrec = c["recurrent-projection-dim"], c["non-recurrent-projection-dim"]
        affine, dropout = c["ng-affine-options"], c["dropout-proportion"] != -1.0
        out = [
            f"##  Begin LSTM layer '{n}'",
            "# Gate control: contains W_i, W_f, W_c and W_o matrices as blocks.",
            f"component name={n}.W_all type=NaturalGradientAffineComponent input-dim={self.input.dim + rec} "
            f"output-dim={4 * cell} {affine} {l2}",
            "# The core LSTM nonlinearity, implemented as a single component.",
            "# Input = (i_part, f_part, c_part, o_part, c_{t-1}), output = (c_t, m_t)",
            "# See cu-math.h:ComputeLstmNonlinearity() for details.",
            f"component name={n}.lstm_nonlin type=LstmNonlinearityComponent cell-dim={cell} "
            f"use-dropout={'true' if dropout else 'false'} {c['lstm-nonlinearity-options']} {l2}",
            "# Component for backprop truncation, to avoid gradient blowup in long training examples.",
            f"component name={n}.cr_trunc type=BackpropTruncationComponent dim={cell + rec} {truncation_options(c)}",
        ]
        if dropout:
            out.append(
                f"component name={n}.dropout_mask type=DropoutMaskComponent output-dim=3 "
                f"dropout-proportion={fmt(c['dropout-proportion'])} "
            )
        out += [
            "# Component specific to 'projected' LSTM (LSTMP), contains both recurrent",
            "# and non-recurrent projections",
            f"component name={n}.W_rp type=NaturalGradientAffineComponent input-dim={cell} "
            f"output-dim={rec + nonrec} {affine} {l2}",
            "###  Nodes for the components above.",
            f"component-node name={n}.W_all component={n}.W_all "
            f"input=Append({self.input.text}, IfDefined(Offset({n}.r_trunc, {delay})))",
        ]
        nonlin_input = f"Append({n}.W_all, IfDefined(Offset({n}.c_trunc, {delay}))"
        if dropout:
            out.append(f"component-node name={n}.dropout_mask component={n}.dropout_mask input={n}.dropout_mask")
            nonlin_input += f", {n}.dropout_mask"
        out += [
            f"component-node name={n}.lstm_nonlin component={n}.lstm_nonlin input={nonlin_input})",
            f"dim-range-node name={n}.c input-node={n}.lstm_nonlin dim-offset=0 dim={cell}",
            f"dim-range-node name={n}.m input-node={n}.lstm_nonlin dim-offset={cell} dim={cell}",
            f"# {n}.rp is the output node of this layer (if we're not including batchnorm)",
            f"component-node name={n}.rp component={n}.W_rp input={n}.m",
            f"dim-range-node name={n}.r input-node={n}.rp dim-offset=0 dim={rec}",
            "# Note: it's not 100% efficient that we have to stitch the c",
            "# and r back together to truncate them but it probably",
            "# makes the deriv truncation more accurate .",
            f"component-node name={n}.cr_trunc component={n}.cr_trunc input=Append({n}.c, {n}.r)",
            f"dim-range-node name={n}.c_trunc input-node={n}.cr_trunc dim-offset=0 dim={cell}",
            f"dim-range-node name={n}.r_trunc input-node={n}.cr_trunc dim-offset={cell} dim={rec}",
        ]
        if self.layer_type == "fast-lstmp-batchnorm-layer":
            out += [
                f"component name={n}.rp_batchnorm type=BatchNormComponent dim={rec + nonrec} ",
                f"component-node name={n}.rp_batchnorm component={n}.rp_batchnorm input={n}.rp",
            ]
        out.append(f"### End LSTM Layer '{n}'")
        return both(out)


@layer_types("lstmb-layer")
class XLstmb(XRecurrent):
    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {
            "input": "[-1]",
            "cell-dim": -1,
            "bottleneck-dim": -1,
            **_SCALE_DEFAULTS,
            "orthonormal-constraint": 1.0,
            "lstm-nonlinearity-options": " max-change=0.75",
            "self-scale": 1.0,
            "ng-affine-options": " max-change=1.5",
            "l2-regularize": 0.0,
            "decay-time": -1.0,
        }

    def check(self) -> None:
        super().check()
        self.require(
            self.config["bottleneck-dim"] > 0,
            f"bottleneck-dim has invalid value {self.config['bottleneck-dim']}",
            "bottleneck-dim",
        )

    def output_name(self, aux: str | None = None) -> str:
        return f"{self.name}.m_batchnorm"

    def lines(self) -> Lines:
        c, n = self.config, self.name
        cell, delay, l2, affine = c["cell-dim"], c["delay"], l2_option(c), c["ng-affine-options"]
        out = [
            f"### Begin LSTM layer '{n}'",
            f"component name={n}.W_all_a type=LinearComponent input-dim={self.input.dim + cell} "
            f"orthonormal-constraint={fmt(c['orthonormal-constraint'])} output-dim={c['bottleneck-dim']} {affine}",
            f"component name={n}.W_all_b type=LinearComponent input-dim={c['bottleneck-dim']} "
            f"output-dim={4 * cell} {affine} {l2}",
            f"component name={n}.W_all_b_so type=ScaleAndOffsetComponent dim={4 * cell} max-change=0.75",
            "# The core LSTM nonlinearity, implemented as a single component.",
            "# Input = (i_part, f_part, c_part, o_part, c_{t-1}), output = (c_t, m_t)",
            "# See cu-math.h:ComputeLstmNonlinearity() for details.",
            f"component name={n}.lstm_nonlin type=LstmNonlinearityComponent cell-dim={cell} "
            f"{c['lstm-nonlinearity-options']} {l2}",
            "# Component for backprop truncation, to avoid gradient blowup in long training examples.",
            f"component name={n}.cm_trunc type=BackpropTruncationComponent dim={2 * cell} {truncation_options(c)}",
            f"component name={n}.m_batchnorm type=BatchNormComponent dim={cell} ",
            "###  Nodes for the components above.",
            f"component-node name={n}.W_all_a component={n}.W_all_a input=Append({self.input.text}, "
            f"IfDefined(Offset(Scale({fmt(c['self-scale'])}, {n}.m_trunc), {delay})))",
            f"component-node name={n}.W_all_b component={n}.W_all_b input={n}.W_all_a",
            f"component-node name={n}.W_all_b_so component={n}.W_all_b_so input={n}.W_all_b",
            f"component-node name={n}.lstm_nonlin component={n}.lstm_nonlin "
            f"input=Append({n}.W_all_b_so, IfDefined(Offset({n}.c_trunc, {delay})))",
            f"dim-range-node name={n}.m input-node={n}.lstm_nonlin dim-offset={cell} dim={cell}",
            f"component-node name={n}.cm_trunc component={n}.cm_trunc input={n}.lstm_nonlin",
            f"dim-range-node name={n}.c_trunc input-node={n}.cm_trunc dim-offset=0 dim={cell}",
            f"dim-range-node name={n}.m_trunc input-node={n}.cm_trunc dim-offset={cell} dim={cell}",
            f"component-node name={n}.m_batchnorm component={n}.m_batchnorm input={n}.m",
            f"### End LSTM layer '{n}'",
        ]
        return both(out)
