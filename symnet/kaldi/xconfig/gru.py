"""Kaldi's xconfig GRU layers (steps/libs/nnet3/xconfig/gru.py).

- `gru-layer`: z_t, r_t (sigmoids), h_t = tanh(W [x, r_t * s_{t-1}]),
  y_t = (1 - z_t) * h_t + z_t * s_{t-1}, written with affine, sigmoid, tanh,
  elementwise-product and no-op components; `1 - z_t` is the descriptor
  `Sum(Scale(-1.0, z_t), Const(1.0, cell-dim))`. Output `name.s_t`.
- `pgru-layer`: the same with a projection `W_s.ys` of y_t (recurrent part
  `s_t`, output `name.sn_t`, auxiliary `name.h_t`).
- `opgru-layer`: the output-gated projected GRU (output `name.sn_t`, auxiliary `name.h_t`).
- `fast-gru-layer`, `fast-pgru-layer`: the same cells with a
  GruNonlinearityComponent (output `name.y_t`; fast-pgru's auxiliary `name.c_t`).
"""

from __future__ import annotations

from typing import Any

from .base import Lines, both, layer_types
from .lstm import XRecurrent, per_element_scale_options, truncation_options

__all__ = ["XFastGru", "XFastPgru", "XGru", "XOpgru", "XPgru"]

_DEFAULTS = {
    "clipping-threshold": 30.0,
    "delay": -1,
    "ng-affine-options": " max-change=0.75 ",
    "self-repair-scale-nonlinearity": 0.00001,
    "zeroing-interval": 20,
    "zeroing-threshold": 15.0,
}


def _one_minus(node: str, dim: int) -> str:
    return f"Sum(Scale(-1.0,{node}), Const(1.0, {dim}))"


@layer_types("gru-layer")
class XGru(XRecurrent):
    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {"input": "[-1]", "cell-dim": -1, "ng-per-element-scale-options": " max-change=0.75", **_DEFAULTS}

    def output_name(self, aux: str | None = None) -> str:
        return f"{self.name}.s_t"

    def lines(self) -> Lines:
        c, n, x = self.config, self.name, self.input.text
        cell, delay, affine, repair = c["cell-dim"], c["delay"], c["ng-affine-options"], self.repair
        s_prev = f"IfDefined(Offset({n}.s_t, {delay}))"
        xs = self.input.dim + cell
        out = [
            "# Update gate control : W_z* matrics",
            f"component name={n}.W_z.xs_z type=NaturalGradientAffineComponent input-dim={xs} output-dim={cell} "
            f"{affine}",
            "# Reset gate control : W_r* matrics",
            f"component name={n}.W_z.xs_r type=NaturalGradientAffineComponent input-dim={xs} output-dim={cell} "
            f"{affine}",
            "# h related matrix : W_h* matrics",
            f"component name={n}.W_h.UW type=NaturalGradientAffineComponent input-dim={xs} output-dim={cell} {affine}",
            "# Defining the non-linearities",
            f"component name={n}.z type=SigmoidComponent dim={cell} {repair}",
            f"component name={n}.r type=SigmoidComponent dim={cell} {repair}",
            f"component name={n}.h type=TanhComponent dim={cell} {repair}",
            "# Defining the components for other cell computations",
        ]
        out += [
            f"component name={n}.{p} type=ElementwiseProductComponent input-dim={2 * cell} output-dim={cell}"
            for p in ("h1", "y1", "y2")
        ]
        out += [
            f"component name={n}.y type=NoOpComponent dim={cell}",
            "# z_t",
            f"component-node name={n}.z_t_pre component={n}.W_z.xs_z input=Append({x}, {s_prev})",
            f"component-node name={n}.z_t component={n}.z input={n}.z_t_pre",
            "# r_t",
            f"component-node name={n}.r_t_pre component={n}.W_z.xs_r input=Append({x}, {s_prev})",
            f"component-node name={n}.r_t component={n}.r input={n}.r_t_pre",
            "# h_t",
            f"component-node name={n}.h1_t component={n}.h1 input=Append({n}.r_t, {s_prev})",
            f"component-node name={n}.h_t_pre component={n}.W_h.UW input=Append({x}, {n}.h1_t)",
            f"component-node name={n}.h_t component={n}.h input={n}.h_t_pre",
            "# y_t",
            "# The following two lines are to implement (1 - z_t)",
            f"component-node name={n}.y1_t component={n}.y1 input=Append({n}.h_t, {_one_minus(f'{n}.z_t', cell)})",
            f"component-node name={n}.y2_t component={n}.y2 input=Append({s_prev}, {n}.z_t)",
            f"component-node name={n}.y_t component={n}.y input=Sum({n}.y1_t, {n}.y2_t)",
            "# s_t : recurrence",
            f"component name={n}.s_r type=BackpropTruncationComponent dim={cell} {truncation_options(c, False)}",
            "# s_t will be output and recurrence",
            f"component-node name={n}.s_t component={n}.s_r input={n}.y_t",
        ]
        return both(out)


class XProjectedGru(XRecurrent):
    projected = True
    aux = ("h_t",)

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {
            "input": "[-1]",
            "cell-dim": -1,
            "recurrent-projection-dim": -1,
            "non-recurrent-projection-dim": -1,
            "ng-per-element-scale-options": " max-change=0.75 ",
            **_DEFAULTS,
        }

    def output_name(self, aux: str | None = None) -> str:
        return f"{self.name}.{aux or 'sn_t'}"

    def projection(self, source: str) -> list[str]:
        """W_s.ys, the projection of `source`, and s_t, its recurrent part through backprop truncation."""
        c, n = self.config, self.name
        rec, nonrec, cell = c["recurrent-projection-dim"], c["non-recurrent-projection-dim"], c["cell-dim"]
        return [
            "# s_t recurrent",
            f"component name={n}.W_s.ys type=NaturalGradientAffineComponent input-dim={cell} "
            f"output-dim={rec + nonrec} {c['ng-affine-options']}",
            f"component name={n}.s_r type=BackpropTruncationComponent dim={rec} {truncation_options(c, False)}",
            "# s_t and n_t : sn_t will be the output",
            f"component-node name={n}.sn_t component={n}.W_s.ys input={source}",
            f"dim-range-node name={n}.s_t_preclip input-node={n}.sn_t dim-offset=0 dim={rec}",
            f"component-node name={n}.s_t component={n}.s_r input={n}.s_t_preclip",
        ]


@layer_types("pgru-layer")
class XPgru(XProjectedGru):
    def lines(self) -> Lines:
        c, n, x = self.config, self.name, self.input.text
        cell, rec, delay = c["cell-dim"], c["recurrent-projection-dim"], c["delay"]
        affine, repair = c["ng-affine-options"], self.repair
        s_prev = f"IfDefined(Offset({n}.s_t, {delay}))"
        xs = self.input.dim + rec
        out = [
            "# Update gate control : W_z* matrics",
            f"component name={n}.W_z.xs_z type=NaturalGradientAffineComponent input-dim={xs} output-dim={cell} "
            f"{affine}",
            "# Reset gate control : W_r* matrics",
            f"component name={n}.W_z.xs_r type=NaturalGradientAffineComponent input-dim={xs} output-dim={rec} {affine}",
            "# h related matrix : W_h* matrics",
            f"component name={n}.W_h.UW type=NaturalGradientAffineComponent input-dim={xs} output-dim={cell} {affine}",
            "# Defining the non-linearities",
            f"component name={n}.z type=SigmoidComponent dim={cell} {repair}",
            f"component name={n}.r type=SigmoidComponent dim={rec} {repair}",
            f"component name={n}.h type=TanhComponent dim={cell} {repair}",
            "# Defining the components for other cell computations",
            f"component name={n}.h1 type=ElementwiseProductComponent input-dim={2 * rec} output-dim={rec}",
            f"component name={n}.y1 type=ElementwiseProductComponent input-dim={2 * cell} output-dim={cell}",
            f"component name={n}.y2 type=ElementwiseProductComponent input-dim={2 * cell} output-dim={cell}",
            f"component name={n}.y type=NoOpComponent dim={cell}",
            "# z_t",
            f"component-node name={n}.z_t_pre component={n}.W_z.xs_z input=Append({x}, {s_prev})",
            f"component-node name={n}.z_t component={n}.z input={n}.z_t_pre",
            "# r_t",
            f"component-node name={n}.r_t_pre component={n}.W_z.xs_r input=Append({x}, {s_prev})",
            f"component-node name={n}.r_t component={n}.r input={n}.r_t_pre",
            "# h_t",
            f"component-node name={n}.h1_t component={n}.h1 input=Append({n}.r_t, {s_prev})",
            f"component-node name={n}.h_t_pre component={n}.W_h.UW input=Append({x}, {n}.h1_t)",
            f"component-node name={n}.h_t component={n}.h input={n}.h_t_pre",
            "# The following two lines are to implement (1 - z_t)",
            f"component-node name={n}.y1_t component={n}.y1 input=Append({n}.h_t, {_one_minus(f'{n}.z_t', cell)})",
            f"component-node name={n}.y2_t component={n}.y2 input=Append(IfDefined(Offset({n}.y_t, {delay})), {n}.z_t)",
            f"component-node name={n}.y_t component={n}.y input=Sum({n}.y1_t, {n}.y2_t)",
        ]
        return both(out + self.projection(f"{n}.y_t"))


@layer_types("opgru-layer")
class XOpgru(XProjectedGru):
    def lines(self) -> Lines:
        c, n, x = self.config, self.name, self.input.text
        cell, rec, delay = c["cell-dim"], c["recurrent-projection-dim"], c["delay"]
        affine, repair, pes = c["ng-affine-options"], self.repair, per_element_scale_options(c)
        s_prev = f"IfDefined(Offset({n}.s_t, {delay}))"
        xs = self.input.dim + rec
        out = [
            "# Update gate control : W_z* matrics",
            f"component name={n}.W_z.xs_z type=NaturalGradientAffineComponent input-dim={xs} output-dim={cell} "
            f"{affine}",
            "# Output gate control : W_r* matrics",
            f"component name={n}.W_z.xs_o type=NaturalGradientAffineComponent input-dim={xs} output-dim={cell} "
            f"{affine}",
            "# h related matrix : W_h* matrics",
            f"component name={n}.W_h.UW type=NaturalGradientAffineComponent input-dim={self.input.dim} "
            f"output-dim={cell} {affine}",
            f"component name={n}.W_h.UW_elementwise type=NaturalGradientPerElementScaleComponent dim={cell} {pes}",
            "# Defining the non-linearities",
            f"component name={n}.z type=SigmoidComponent dim={cell} {repair}",
            f"component name={n}.o type=SigmoidComponent dim={cell} {repair}",
            f"component name={n}.h type=TanhComponent dim={cell} {repair}",
            "# Defining the components for other cell computations",
        ]
        out += [
            f"component name={n}.{p} type=ElementwiseProductComponent input-dim={2 * cell} output-dim={cell}"
            for p in ("o1", "y1", "y2")
        ]
        out += [
            f"component name={n}.y type=NoOpComponent dim={cell}",
            "# z_t",
            f"component-node name={n}.z_t_pre component={n}.W_z.xs_z input=Append({x}, {s_prev})",
            f"component-node name={n}.z_t component={n}.z input={n}.z_t_pre",
            "# o_t",
            f"component-node name={n}.o_t_pre component={n}.W_z.xs_o input=Append({x}, {s_prev})",
            f"component-node name={n}.o_t component={n}.o input={n}.o_t_pre",
            "# h_t",
            f"component-node name={n}.h_t_pre component={n}.W_h.UW input={x}",
            f"component-node name={n}.h_t_pre2 component={n}.W_h.UW_elementwise "
            f"input=IfDefined(Offset({n}.y_r_t, {delay}))",
            f"component-node name={n}.h_t component={n}.h input=Sum({n}.h_t_pre, {n}.h_t_pre2)",
            "# The following two lines are to implement (1 - z_t)",
            f"component-node name={n}.y1_t component={n}.y1 input=Append({n}.h_t, {_one_minus(f'{n}.z_t', cell)})",
            f"component-node name={n}.y2_t component={n}.y2 input=Append(IfDefined(Offset({n}.y_t, {delay})), {n}.z_t)",
            f"component-node name={n}.y_t component={n}.y input=Sum({n}.y1_t, {n}.y2_t)",
            f"component-node name={n}.y_o_t component={n}.o1 input=Append({n}.o_t, {n}.y_t)",
            f"component name={n}.y_r type=BackpropTruncationComponent dim={cell} {truncation_options(c, False)}",
            f"component-node name={n}.y_r_t component={n}.y_r input={n}.y_t",
        ]
        return both(out + self.projection(f"{n}.y_o_t"))


@layer_types("fast-gru-layer")
class XFastGru(XRecurrent):
    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {
            "input": "[-1]",
            "cell-dim": -1,
            "ng-per-element-scale-options": " max-change=0.75",
            **_DEFAULTS,
            "gru-nonlinearity-options": " max-change=0.75",
        }

    def output_name(self, aux: str | None = None) -> str:
        return f"{self.name}.y_t"

    def lines(self) -> Lines:
        c, n, x = self.config, self.name, self.input.text
        cell, delay, affine, repair = c["cell-dim"], c["delay"], c["ng-affine-options"], self.repair
        s_prev = f"IfDefined(Offset({n}.s_t, {delay}))"
        xs = self.input.dim + cell
        return both(
            [
                "# W_z and W_rr matrics for z_t and r_t",
                f"component name={n}.W_z type=NaturalGradientAffineComponent input-dim={xs} output-dim={cell} {affine}",
                f"component name={n}.W_r type=NaturalGradientAffineComponent input-dim={xs} output-dim={cell} {affine}",
                "# hpart_t related matrix : W_hpart matrics",
                f"component name={n}.W_hpart type=NaturalGradientAffineComponent input-dim={self.input.dim} "
                f"output-dim={cell} {affine}",
                "# Defining the non-linearities for z_t and r_t",
                f"component name={n}.z type=SigmoidComponent dim={cell} {repair}",
                f"component name={n}.r type=SigmoidComponent dim={cell} {repair}",
                "# z_t and r_t",
                f"component-node name={n}.z_t_pre component={n}.W_z input=Append({x}, {s_prev})",
                f"component-node name={n}.z_t component={n}.z input={n}.z_t_pre",
                f"component-node name={n}.r_t_pre component={n}.W_r input=Append({x}, {s_prev})",
                f"component-node name={n}.r_t component={n}.r input={n}.r_t_pre",
                "# hpart_t",
                f"component-node name={n}.hpart_t component={n}.W_hpart input={x}",
                "# y_t and h_t",
                f"component name={n}.gru_nonlin type=GruNonlinearityComponent cell-dim={cell} "
                f"{c['gru-nonlinearity-options']}",
                f"component-node name={n}.gru_nonlin_t component={n}.gru_nonlin "
                f"input=Append({n}.z_t, {n}.r_t, {n}.hpart_t, {s_prev})",
                f"dim-range-node name={n}.y_t input-node={n}.gru_nonlin_t dim-offset={cell} dim={cell}",
                "# s_t : recurrence",
                f"component name={n}.s_r type=BackpropTruncationComponent dim={cell} {truncation_options(c, False)}",
                f"component-node name={n}.s_t component={n}.s_r input={n}.y_t",
            ]
        )


@layer_types("fast-pgru-layer")
class XFastPgru(XRecurrent):
    projected = True
    aux = ("c_t",)

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {
            "input": "[-1]",
            "cell-dim": -1,
            "recurrent-projection-dim": -1,
            "non-recurrent-projection-dim": -1,
            "ng-per-element-scale-options": " max-change=0.75 ",
            **_DEFAULTS,
            "gru-nonlinearity-options": " max-change=0.75",
        }

    def output_name(self, aux: str | None = None) -> str:
        return f"{self.name}.{aux or 'y_t'}"

    def lines(self) -> Lines:
        c, n, x = self.config, self.name, self.input.text
        cell, rec, nonrec, delay = (
            c["cell-dim"],
            c["recurrent-projection-dim"],
            c["non-recurrent-projection-dim"],
            c["delay"],
        )
        affine, repair = c["ng-affine-options"], self.repair
        s_prev = f"IfDefined(Offset({n}.s_t, {delay}))"
        xs = self.input.dim + rec
        return both(
            [
                "# W_z and W_r matrics for z_t and r_t",
                f"component name={n}.W_z type=NaturalGradientAffineComponent input-dim={xs} output-dim={cell} {affine}",
                f"component name={n}.W_r type=NaturalGradientAffineComponent input-dim={xs} output-dim={rec} {affine}",
                "# hpart_t related matrix : W_hpart matrics",
                f"component name={n}.W_hpart type=NaturalGradientAffineComponent input-dim={self.input.dim} "
                f"output-dim={cell} {affine}",
                "# Defining the non-linearities for z_t and r_t",
                f"component name={n}.z type=SigmoidComponent dim={cell} {repair}",
                f"component name={n}.r type=SigmoidComponent dim={rec} {repair}",
                "# z_t and r_t",
                f"component-node name={n}.z_t_pre component={n}.W_z input=Append({x}, {s_prev})",
                f"component-node name={n}.z_t component={n}.z input={n}.z_t_pre",
                f"component-node name={n}.r_t_pre component={n}.W_r input=Append({x}, {s_prev})",
                f"component-node name={n}.r_t component={n}.r input={n}.r_t_pre",
                "# hpart_t",
                f"component-node name={n}.hpart_t component={n}.W_hpart input={x}",
                "# c_t and h_t",
                f"component name={n}.gru_nonlin type=GruNonlinearityComponent cell-dim={cell} recurrent-dim={rec} "
                f"{c['gru-nonlinearity-options']}",
                f"component-node name={n}.gru_nonlin_t component={n}.gru_nonlin input=Append({n}.z_t, {n}.r_t, "
                f"{n}.hpart_t, IfDefined(Offset({n}.c_t, {delay})), {s_prev})",
                f"dim-range-node name={n}.c_t input-node={n}.gru_nonlin_t dim-offset={cell} dim={cell}",
                "# the projected matrix W_y and y_t",
                f"component name={n}.W_y type=NaturalGradientAffineComponent input-dim={cell} "
                f"output-dim={rec + nonrec} {affine}",
                f"component-node name={n}.y_t component={n}.W_y input={n}.c_t",
                "# s_t : recurrence",
                f"component name={n}.s_r type=BackpropTruncationComponent dim={rec} {truncation_options(c, False)}",
                f"dim-range-node name={n}.s_t_pre input-node={n}.y_t dim-offset=0 dim={rec}",
                f"component-node name={n}.s_t component={n}.s_r input={n}.s_t_pre",
            ]
        )
