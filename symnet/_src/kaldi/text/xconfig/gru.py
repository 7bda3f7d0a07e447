"""Kaldi's xconfig GRU layers (steps/libs/nnet3/xconfig/gru.py).

- `gru-layer`: z_t, r_t (sigmoids), h_t = tanh(W [x, r_t * s_{t-1}]),
  y_t = (1 - z_t) * h_t + z_t * s_{t-1}, written with affine, sigmoid, tanh,
  elementwise-product and no-op components; `1 - z_t` is the descriptor
  `Sum(Scale(-1.0, z_t), Const(1.0, cell-dim))`. Output `name.s_t`.
- `pgru-layer`: the same with a projection `W_s.ys` of y_t (recurrent part
  `s_t`, output `name.sn_t`, auxiliary `name.h_t`).
- `opgru-layer`: the output-gated projected GRU: an output gate o_t instead of
  the reset gate, h_t from the input and a per-element scale of y_{t-1}
  (output `name.sn_t`, auxiliary `name.h_t`).
- `norm-pgru-layer`, `norm-opgru-layer`: the same with batch-norm on the
  output (`sn_t`), renorm on the recurrence (`s_t`) and optional dropout on
  the gates (`dropout-proportion`, `dropout-per-frame`).
- `fast-gru-layer`, `fast-pgru-layer`: the GRU cell as one
  GruNonlinearityComponent (output `name.y_t`; fast-pgru's auxiliary `name.c_t`).
- `fast-opgru-layer`: the output-gated cell as an OutputGruNonlinearityComponent
  (output `name.y_t`, auxiliary `name.c_t`).
- `fast-norm-pgru-layer`, `fast-norm-opgru-layer`: the fast projected cells
  with renorm on the recurrence, batch-norm on the output and optional dropout.
"""

from __future__ import annotations

from typing import Any

from .base import Lines, both, fmt, layer_types
from .lstm import XRecurrent, l2_option, per_element_scale_options, truncation_options

__all__ = [
    "XFastGru",
    "XFastNormOpgru",
    "XFastNormPgru",
    "XFastOpgru",
    "XFastPgru",
    "XGru",
    "XNormOpgru",
    "XNormPgru",
    "XOpgru",
    "XPgru",
]

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


_PROJECTED = {
    "recurrent-projection-dim": -1,
    "non-recurrent-projection-dim": -1,
    "ng-per-element-scale-options": " max-change=0.75 ",
}
_DROPOUT = {"dropout-proportion": -1.0, "dropout-per-frame": True}
_NONLINEARITY = {"gru-nonlinearity-options": " max-change=0.75"}


class XProjectedGru(XRecurrent):
    """What the projected GRUs share: the dims, the recurrence and (norm- variants) the dropout on the gates."""

    projected = True
    #: Batch-norm on the output, renorm on the recurrence, dropout-proportion (the norm- layers).
    norm = False

    @property
    def dropout(self) -> bool:
        return self.norm and self.config["dropout-proportion"] != -1.0

    def dropout_line(self, suffix: str, dim: int) -> str:
        c = self.config
        return (
            f"component name={self.name}.dropout{suffix} type=DropoutComponent dim={dim} "
            f"dropout-proportion={fmt(c['dropout-proportion'])} "
            f"dropout-per-frame={'true' if c['dropout-per-frame'] else 'false'}"
        )

    def gate(self, gate: str, predrop: str, dropout: str) -> list[str]:
        """The node `gate`_t (z_t, r_t, o_t) from `gate`_t_pre, through dropout when there is some."""
        n = self.name
        if not self.dropout:
            return [f"component-node name={n}.{gate}_t component={n}.{gate} input={n}.{gate}_t_pre"]
        return [
            f"component-node name={n}.{predrop} component={n}.{gate} input={n}.{gate}_t_pre",
            f"component-node name={n}.{gate}_t component={n}.{dropout} input={n}.{predrop}",
        ]

    @property
    def dims(self) -> tuple[int, int, int, int]:
        """cell-dim, recurrent-projection-dim, non-recurrent-projection-dim, delay."""
        c = self.config
        return c["cell-dim"], c["recurrent-projection-dim"], c["non-recurrent-projection-dim"], c["delay"]

    def recurrence(self, dim: int) -> str:
        """s_r, the backprop truncation of the recurrence."""
        options = truncation_options(self.config, False)
        return f"component name={self.name}.s_r type=BackpropTruncationComponent dim={dim} {options}"

    def affine(self, component: str, input_dim: int, output_dim: int) -> str:
        return (
            f"component name={self.name}.{component} type=NaturalGradientAffineComponent input-dim={input_dim} "
            f"output-dim={output_dim} {self.config['ng-affine-options']}"
        )


class XClassicGru(XProjectedGru):
    """pgru and opgru (and their norm- variants): output `sn_t`, auxiliary `h_t`."""

    aux = ("h_t",)

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {"input": "[-1]", "cell-dim": -1, **_PROJECTED, **_DEFAULTS}

    def output_name(self, aux: str | None = None) -> str:
        return f"{self.name}.{aux or 'sn_t'}"

    def projection(self, source: str, l2: str = "") -> list[str]:
        """W_s.ys, the projection of `source` (sn_t, the output), and its recurrent part s_t (the norm- layers
        add their nodes after sn_nobatchnorm_t, each in its own order)."""
        n, (cell, rec, nonrec, _) = self.name, self.dims
        out = [
            "# s_t recurrent",
            self.affine("W_s.ys", cell, rec + nonrec) + l2,
            self.recurrence(rec),
        ]
        if not self.norm:
            return out + [
                "# s_t and n_t : sn_t will be the output",
                f"component-node name={n}.sn_t component={n}.W_s.ys input={source}",
                f"dim-range-node name={n}.s_t_preclip input-node={n}.sn_t dim-offset=0 dim={rec}",
                f"component-node name={n}.s_t component={n}.s_r input={n}.s_t_preclip",
            ]
        return out + [
            f"component name={n}.batchnorm type=BatchNormComponent dim={rec + nonrec} target-rms=1.0",
            f"component name={n}.renorm type=NormalizeComponent dim={rec} target-rms=1.0",
            "# s_t and n_t : sn_t will be the output",
            f"component-node name={n}.sn_nobatchnorm_t component={n}.W_s.ys input={source}",
        ]


@layer_types("pgru-layer")
class XPgru(XClassicGru):
    def lines(self) -> Lines:
        n, x, repair = self.name, self.input.text, self.repair
        cell, rec, _, delay = self.dims
        s_prev = f"IfDefined(Offset({n}.s_t, {delay}))"
        xs = self.input.dim + rec
        out = [
            "# Update gate control : W_z* matrics",
            self.affine("W_z.xs_z", xs, cell),
            "# Reset gate control : W_r* matrics",
            self.affine("W_z.xs_r", xs, rec),
            "# h related matrix : W_h* matrics",
            self.affine("W_h.UW", xs, cell),
        ]
        if self.dropout:
            out += [self.dropout_line("_z", cell), self.dropout_line("_r", rec)]
        out += [
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
            *self.gate("z", "z_predrop_t", "dropout_z"),
            "# r_t",
            f"component-node name={n}.r_t_pre component={n}.W_z.xs_r input=Append({x}, {s_prev})",
            *self.gate("r", "r_predrop_t", "dropout_r"),
            "# h_t",
            f"component-node name={n}.h1_t component={n}.h1 input=Append({n}.r_t, {s_prev})",
            f"component-node name={n}.h_t_pre component={n}.W_h.UW input=Append({x}, {n}.h1_t)",
            f"component-node name={n}.h_t component={n}.h input={n}.h_t_pre",
            f"component-node name={n}.y1_t component={n}.y1 input=Append({n}.h_t, {_one_minus(f'{n}.z_t', cell)})",
            f"component-node name={n}.y2_t component={n}.y2 input=Append(IfDefined(Offset({n}.y_t, {delay})), {n}.z_t)",
            f"component-node name={n}.y_t component={n}.y input=Sum({n}.y1_t, {n}.y2_t)",
            *self.projection(f"{n}.y_t"),
        ]
        if self.norm:
            out += [
                f"dim-range-node name={n}.s_t_preclip input-node={n}.sn_nobatchnorm_t dim-offset=0 dim={rec}",
                f"component-node name={n}.sn_t component={n}.batchnorm input={n}.sn_nobatchnorm_t",
                f"component-node name={n}.s_renorm_t component={n}.renorm input={n}.s_t_preclip",
                f"component-node name={n}.s_t component={n}.s_r input={n}.s_renorm_t",
            ]
        return both(out)


@layer_types("norm-pgru-layer")
class XNormPgru(XPgru):
    norm = True

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {**super().defaults(), **_DROPOUT}


@layer_types("opgru-layer")
class XOpgru(XClassicGru):
    def lines(self) -> Lines:
        c, n, x, repair = self.config, self.name, self.input.text, self.repair
        cell, rec, _, delay = self.dims
        s_prev, y_prev = f"IfDefined(Offset({n}.s_t, {delay}))", f"IfDefined(Offset({n}.y_t, {delay}))"
        xs = self.input.dim + rec
        l2 = f" {l2_option(c)}" if self.norm else ""  # norm-opgru's affines take l2-regularize
        out = [
            "# Update gate control : W_z* matrics",
            self.affine("W_z.xs_z", xs, cell) + l2,
            "# Output gate control : W_r* matrics",
            self.affine("W_z.xs_o", xs, cell) + l2,
            "# h related matrix : W_h* matrics",
            self.affine("W_h.UW", self.input.dim, cell) + l2,
            f"component name={n}.W_h.UW_elementwise type=NaturalGradientPerElementScaleComponent dim={cell} "
            f"{per_element_scale_options(c)}",
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
        out.append(f"component name={n}.y type=NoOpComponent dim={cell}")
        if self.dropout:
            out.append(self.dropout_line("", cell))
        out += [
            "# z_t",
            f"component-node name={n}.z_t_pre component={n}.W_z.xs_z input=Append({x}, {s_prev})",
            *self.gate("z", "z_predrop_t", "dropout"),
            "# o_t",
            f"component-node name={n}.o_t_pre component={n}.W_z.xs_o input=Append({x}, {s_prev})",
            *self.gate("o", "o_predrop_t", "dropout"),
            "# h_t",
            f"component-node name={n}.h_t_pre component={n}.W_h.UW input={x}",
            f"component-node name={n}.h_t_pre2 component={n}.W_h.UW_elementwise input={y_prev}",
            f"component-node name={n}.h_t component={n}.h input=Sum({n}.h_t_pre, {n}.h_t_pre2)",
        ]
        if self.norm:
            out.append("# The following two lines are to implement (1 - z_t)")
        out += [
            f"component-node name={n}.y1_t component={n}.y1 input=Append({n}.h_t, {_one_minus(f'{n}.z_t', cell)})",
            f"component-node name={n}.y2_t component={n}.y2 input=Append({y_prev}, {n}.z_t)",
            f"component-node name={n}.y_t component={n}.y input=Sum({n}.y1_t, {n}.y2_t)",
            f"component-node name={n}.y_o_t component={n}.o1 input=Append({n}.o_t, {n}.y_t)",
            *self.projection(f"{n}.y_o_t", l2),
        ]
        if self.norm:
            out += [
                f"component-node name={n}.sn_t component={n}.batchnorm input={n}.sn_nobatchnorm_t",
                f"dim-range-node name={n}.s_t_preclip input-node={n}.sn_nobatchnorm_t dim-offset=0 dim={rec}",
                f"component-node name={n}.s_t_preclip_renorm component={n}.renorm input={n}.s_t_preclip",
                f"component-node name={n}.s_t component={n}.s_r input={n}.s_t_preclip_renorm",
            ]
        return both(out)


@layer_types("norm-opgru-layer")
class XNormOpgru(XOpgru):
    norm = True

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {**super().defaults(), **_DROPOUT, "l2-regularize": 0.0}


@layer_types("fast-gru-layer")
class XFastGru(XRecurrent):
    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {
            "input": "[-1]",
            "cell-dim": -1,
            "ng-per-element-scale-options": " max-change=0.75",
            **_DEFAULTS,
            **_NONLINEARITY,
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
                f"### Begin Gru layer '{n}'",
                "# Update gate control : W_z* matrices",
                f"component name={n}.W_z.xh type=NaturalGradientAffineComponent input-dim={xs} output-dim={cell} "
                f"{affine}",
                "# Reset gate control : W_r* matrices",
                f"component name={n}.W_r.xh type=NaturalGradientAffineComponent input-dim={xs} output-dim={cell} "
                f"{affine}",
                "# hpart_t related matrix : W_hpart matrice",
                f"component name={n}.W_hpart.x type=NaturalGradientAffineComponent input-dim={self.input.dim} "
                f"output-dim={cell} {affine}",
                "# Defining the non-linearities for z_t and r_t",
                f"component name={n}.z type=SigmoidComponent dim={cell} {repair}",
                f"component name={n}.r type=SigmoidComponent dim={cell} {repair}",
                "# z_t",
                f"component-node name={n}.z_t_pre component={n}.W_z.xh input=Append({x}, {s_prev})",
                f"component-node name={n}.z_t component={n}.z input={n}.z_t_pre",
                "# r_t",
                f"component-node name={n}.r_t_pre component={n}.W_r.xh input=Append({x}, {s_prev})",
                f"component-node name={n}.r_t component={n}.r input={n}.r_t_pre",
                "# hpart_t",
                f"component-node name={n}.hpart_t component={n}.W_hpart.x input={x}",
                "# y_t",
                "# Note: the output of GruNonlinearityComponent is (h_t, c_t), we just get the second half. "
                "Otherwise, in non-projection gru layer, y_t = c_t",
                f"component name={n}.gru_nonlin type=GruNonlinearityComponent cell-dim={cell} "
                f"{c['gru-nonlinearity-options']}",
                f"component-node name={n}.gru_nonlin_t component={n}.gru_nonlin "
                f"input=Append({n}.z_t, {n}.r_t, {n}.hpart_t, {s_prev})",
                f"dim-range-node name={n}.y_t input-node={n}.gru_nonlin_t dim-offset={cell} dim={cell}",
                "# s_t : recurrence",
                "# Note: in non-projection gru layer, the recurrent part equals the output, namely y_t.",
                f"component name={n}.s_r type=BackpropTruncationComponent dim={cell} {truncation_options(c, False)}",
                f"component-node name={n}.s_t component={n}.s_r input={n}.y_t",
            ]
        )


class XFastProjectedGru(XProjectedGru):
    """fast-pgru and fast-opgru (and their norm- variants): output `y_t`, auxiliary `c_t`."""

    aux = ("c_t",)

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {"input": "[-1]", "cell-dim": -1, **_PROJECTED, **_DEFAULTS, **_NONLINEARITY}

    def output_name(self, aux: str | None = None) -> str:
        return f"{self.name}.{aux or 'y_t'}"

    def output_lines(self, source: str, before: list[str]) -> list[str]:
        """From `source` (c_t, or c_t times o_t made by the lines `before`) to the output y_t and the recurrence s_t."""
        n, (cell, rec, nonrec, _) = self.name, self.dims
        trunc = self.recurrence(rec)
        projection = "W_y.cdoto" if source.endswith("cdoto") else "W_y.c"
        if not self.norm:
            out = [
                f"# the projected matrix {projection} and y_t",
                *before,
                self.affine(projection, cell, rec + nonrec),
                f"component-node name={n}.y_t component={n}.{projection} input={source}",
            ]
            pre = "s_t_preclip" if projection == "W_y.cdoto" else "s_t_pre"
            comment = "# s_t recurrence" if projection == "W_y.cdoto" else "# s_t : recurrence"
            return out + [
                comment,
                trunc,
                f"dim-range-node name={n}.{pre} input-node={n}.y_t dim-offset=0 dim={rec}",
                f"component-node name={n}.s_t component={n}.s_r input={n}.{pre}",
            ]
        return [
            f"# the projected matrix {projection} and y_t_tmp",
            *before,
            self.affine(projection, cell, rec + nonrec),
            f"component-node name={n}.y_t_tmp component={n}.{projection} input={source}",
            "# s_t : recurrence",
            f"component name={n}.renorm type=NormalizeComponent dim={rec} target-rms=1.0",
            trunc,
            f"dim-range-node name={n}.s_t_pre input-node={n}.y_t_tmp dim-offset=0 dim={rec}",
            f"component-node name={n}.s_t_renorm component={n}.renorm input={n}.s_t_pre",
            f"component-node name={n}.s_t component={n}.s_r input={n}.s_t_renorm",
            "# y_t : output",
            f"component name={n}.batchnorm type=BatchNormComponent dim={rec + nonrec} target-rms=1.0",
            f"component-node name={n}.y_t component={n}.batchnorm input={n}.y_t_tmp",
        ]

    def gates(self, second: str) -> list[str]:
        """The nodes of z_t and `second`_t (r_t or o_t), through dropout in the norm- layers (the fast-norm-pgru
        has one dropout component per gate, the fast-norm-opgru one for both)."""
        n, x, delay = self.name, self.input.text, self.config["delay"]
        s_prev = f"IfDefined(Offset({n}.s_t, {delay}))"
        z_pre = f"component-node name={n}.z_t_pre component={n}.W_z.xs input=Append({x}, {s_prev})"
        other_pre = f"component-node name={n}.{second}_t_pre component={n}.W_{second}.xs input=Append({x}, {s_prev})"
        if not self.norm:
            return [f"# z_t and {second}_t", z_pre, *self.gate("z", "", ""), other_pre, *self.gate(second, "", "")]
        z_dropout, other_dropout = ("dropout_z", "dropout_r") if second == "r" else ("dropout", "dropout")
        return [
            "# z_t",
            z_pre,
            *self.gate("z", "z_t_predrop", z_dropout),
            f"# {second}_t",
            other_pre,
            *self.gate(second, f"{second}_t_predrop", other_dropout),
        ]

    def head(self, second: str, second_dim: int) -> list[str]:
        """The affines and the sigmoids of z_t and `second`_t (r_t of the fast-pgru, o_t of the fast-opgru)."""
        n, repair = self.name, self.repair
        cell, rec, _, _ = self.dims
        xs = self.input.dim + rec
        out = [
            f"### Begin Gru layer '{n}'",
            "# Update gate control : W_z* matrices",
            self.affine("W_z.xs", xs, cell),
            f"# Reset gate control : W_{second}* matrices",
            self.affine(f"W_{second}.xs", xs, second_dim),
            "# hpart_t related matrix : W_hpart matric",
            self.affine("W_hpart.x", self.input.dim, cell),
            "# Defining the non-linearities",
            f"component name={n}.z type=SigmoidComponent dim={cell} {repair}",
            f"component name={n}.{second} type=SigmoidComponent dim={second_dim} {repair}",
        ]
        if self.dropout:
            out.append("# Defining the dropout component")
            if second == "r":
                out += [self.dropout_line("_z", cell), self.dropout_line("_r", rec)]
            else:
                out.append(self.dropout_line("", cell))
        return out


@layer_types("fast-pgru-layer")
class XFastPgru(XFastProjectedGru):
    def lines(self) -> Lines:
        c, n, delay = self.config, self.name, self.config["delay"]
        cell, rec, _, _ = self.dims
        out = [
            *self.head("r", rec),
            *self.gates("r"),
            "# hpart_t",
            f"component-node name={n}.hpart_t component={n}.W_hpart.x input={self.input.text}",
            "# c_t",
            "# Note: the output of GruNonlinearityComponent is (h_t, c_t), we use the second half.",
            f"component name={n}.gru_nonlin type=GruNonlinearityComponent cell-dim={cell} recurrent-dim={rec} "
            f"{c['gru-nonlinearity-options']}",
            f"component-node name={n}.gru_nonlin_t component={n}.gru_nonlin input=Append({n}.z_t, {n}.r_t, "
            f"{n}.hpart_t, IfDefined(Offset({n}.c_t, {delay})), IfDefined(Offset({n}.s_t, {delay})))",
            f"dim-range-node name={n}.c_t input-node={n}.gru_nonlin_t dim-offset={cell} dim={cell}",
            *self.output_lines(f"{n}.c_t", []),
        ]
        return both(out)


@layer_types("fast-norm-pgru-layer")
class XFastNormPgru(XFastPgru):
    norm = True

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {**super().defaults(), **_DROPOUT}


@layer_types("fast-opgru-layer")
class XFastOpgru(XFastProjectedGru):
    def lines(self) -> Lines:
        c, n, delay = self.config, self.name, self.config["delay"]
        cell = c["cell-dim"]
        cdoto = [
            f"component name={n}.cdoto type=ElementwiseProductComponent input-dim={2 * cell} output-dim={cell}",
            f"component-node name={n}.cdoto component={n}.cdoto input=Append({n}.c_t, {n}.o_t)",
        ]
        out = [
            *self.head("o", cell),
            *self.gates("o"),
            "# hpart_t",
            f"component-node name={n}.hpart_t component={n}.W_hpart.x input={self.input.text}",
            "# c_t",
            "# Note: the output of OutputGruNonlinearityComponent is (h_t, c_t), we use the second half.",
            f"component name={n}.gru_nonlin type=OutputGruNonlinearityComponent cell-dim={cell} "
            f"{c['gru-nonlinearity-options']}",
            f"component-node name={n}.gru_nonlin_t component={n}.gru_nonlin "
            f"input=Append({n}.z_t, {n}.hpart_t, IfDefined(Offset({n}.c_t, {delay})))",
            f"dim-range-node name={n}.c_t input-node={n}.gru_nonlin_t dim-offset={cell} dim={cell}",
            *self.output_lines(f"{n}.cdoto", cdoto),
        ]
        return both(out)


@layer_types("fast-norm-opgru-layer")
class XFastNormOpgru(XFastOpgru):
    norm = True

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {**super().defaults(), **_DROPOUT}
