"""Typed recurrent layers: `LSTM`, `GRU` and the `Bidirectional` wrapper, as trees of Kaldi's components.

Each is a function that returns the layer's output Node, built from Kaldi
components and descriptors the way Kaldi's xconfig builds its fast LSTM and
GRU (`fast-lstm-layer`, `fast-lstmp-layer`, `fast-gru-layer`, `fast-pgru-layer`), with the same
node and parameter names under the given `name`. So the engine's fused scan
runs them unchanged (`Computation.explain()` lists the recurrence), a Network
holding them writes to a Kaldi config or model as they are, and one read back
computes the same.

LSTM (`LSTM("lstm1", x, cell=256, projection=128)`): one affine map `W_all`
of `[x(t), r(t + delay)]` gives the four gate inputs, Kaldi's
LstmNonlinearityComponent (diagonal peepholes `w_ic, w_fc, w_oc`) gives
`[c(t), m(t)]`:

    i = sigmoid(W_i [x, r_prev] + b_i + w_ic * c_prev)
    f = sigmoid(W_f [x, r_prev] + b_f + w_fc * c_prev)
    c = f * c_prev + i * tanh(W_c [x, r_prev] + b_c)
    o = sigmoid(W_o [x, r_prev] + b_o + w_oc * c)
    m = o * tanh(c)

Without a projection the output and the recurrent state `r` are `m`
(node `name.m`); with `projection=p` an affine map `W_rp` takes `m` to
`p + non_recurrent_projection` columns (node `name.rp`, the output) whose
first `p` are `r` (Kaldi's LSTMP). The state starts at zero (`IfDefined`).

GRU (`GRU("gru1", x, cell=256)`): Kaldi's GruNonlinearityComponent (with
`projection=p`, Kaldi's fast-pgru: the state recurring is the first p columns
of an affine map of the cell, see `GRU`),

    z = sigmoid(W_z [x, y_prev] + b_z),  r = sigmoid(W_r [x, y_prev] + b_r)
    h = tanh(W_h x + b_h + (r * y_prev) U^T)
    y = (1 - z) * h + z * y_prev

(output node `name.y_t`; U is `name.gru_nonlin.w_h`). This is Cho et al.'s
GRU as Kaldi writes it (the reset gate scales `y_prev` before `U`; PyTorch's
scales `U y_prev + b`).

`truncate=True` adds Kaldi's BackpropTruncationComponent on the recurrence:
`clipping_threshold` (30) clips each frame's gradient norm, `zeroing_threshold`
(15) zeroes larger ones every `zeroing_interval` (20) frames, as xconfig's
defaults; `decay_time` scales the recurrence by `1 - |delay| / decay_time`.
It changes only the backward pass (and, with a decay time, the forward).

`dropout=p` is Kaldi's LSTM dropout (fast-lstmp's `dropout-proportion`): a
DropoutMaskComponent draws, per frame, scales for the gates i, f and o (0 or
1; i and f never both 0) that multiply them in the cell; in test mode
(`symnet.components.set_test_mode`) each scale is `1 - p`.

`peepholes=False` makes the LSTM's peephole weights a FixedWeight of zeros
(state, never trained); Kaldi's component has no such switch, so a Kaldi
model written from it holds the zeros as trainable parameters.

`Bidirectional(LSTM, "blstm1", x, cell=...)` builds the layer twice, reading
earlier frames (`name.forward`, delay -1) and later ones (`name.backward`,
delay +1), and appends their outputs.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import attrs

from ..base.errors import LayerOptionError, ShapeError, at
from ..components.misc import BackpropTruncationComponent, DropoutMaskComponent
from ..components.nonlinear import SigmoidComponent
from ..components.recurrent import GruNonlinearityComponent, LstmNonlinearityComponent
from ..core.descriptor import Append, DimRange, IfDefined, Node, Offset, Ref
from ..core.initializers import Normal, Zeros
from ..core.layer import FixedWeight, Layer, Weight, layer_class
from ..core.source import user_line
from .base import KaldiPart, checked_call, static_input_dim
from .dense import Affine

__all__ = ["GRU", "LSTM", "Bidirectional"]


def _positive(layer: str, option: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise LayerOptionError(f"{layer}: {option} must be a positive integer, got {value!r}{at(user_line())}")
    return value


def _check(
    layer: str,
    name: Any,
    x: Layer,
    delay: Any,
    truncate: Any,
    decay_time: Any,
    clipping_threshold: Any,
    zeroing_threshold: Any,
    zeroing_interval: Any,
) -> int:
    """The input dim, after checking the options every recurrent layer takes."""
    if not isinstance(name, str) or not name:
        raise LayerOptionError(f"{layer}: name must be a non-empty string, got {name!r}{at(user_line())}")
    if isinstance(delay, bool) or not isinstance(delay, int) or delay == 0:
        raise LayerOptionError(f"{layer} {name!r}: delay must be a non-zero integer, got {delay!r}{at(user_line())}")
    if not isinstance(truncate, bool):
        raise LayerOptionError(f"{layer} {name!r}: truncate must be True or False, got {truncate!r}{at(user_line())}")
    given = [
        option
        for option, value, default in (
            ("decay_time", decay_time, None),
            ("clipping_threshold", clipping_threshold, 30.0),
            ("zeroing_threshold", zeroing_threshold, 15.0),
            ("zeroing_interval", zeroing_interval, 20),
        )
        if value != default
    ]
    if given and not truncate:
        raise LayerOptionError(f"{layer} {name!r}: {given[0]} needs truncate=True{at(user_line())}")
    for option, value in (("clipping_threshold", clipping_threshold), ("zeroing_threshold", zeroing_threshold)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise LayerOptionError(
                f"{layer} {name!r}: {option} must be a number >= 0 (0: none), got {value!r}{at(user_line())}"
            )
    _positive(f"{layer} {name!r}", "zeroing_interval", zeroing_interval)
    if decay_time is not None:
        if isinstance(decay_time, bool) or not isinstance(decay_time, (int, float)) or decay_time <= abs(delay):
            raise LayerOptionError(
                f"{layer} {name!r}: decay_time must be a number above |delay| = {abs(delay)}, "
                f"got {decay_time!r}{at(user_line())}"
            )
    dim = static_input_dim(x)
    if dim is None:
        raise ShapeError(
            f"{layer} {name!r}{at(user_line())}: the dim of its input is not known before running; "
            f"read the input as Input(name, dim)"
        )
    return dim


# The Kaldi components the layers are built of (see `KaldiPart`).


@layer_class
class _LstmCell(KaldiPart, LstmNonlinearityComponent):
    component = LstmNonlinearityComponent


@layer_class
class _DropoutMask(KaldiPart, DropoutMaskComponent):
    component = DropoutMaskComponent


@layer_class
class _GruCell(KaldiPart, GruNonlinearityComponent):
    component = GruNonlinearityComponent


@layer_class
class _Sigmoid(KaldiPart, SigmoidComponent):
    component = SigmoidComponent


@layer_class
class _Truncation(KaldiPart, BackpropTruncationComponent):
    component = BackpropTruncationComponent


def _affine(name: str, x: Layer, in_dim: int, out_dim: int) -> Layer:
    """Kaldi's affine component `name` (W normal with stddev 1/sqrt(in_dim), b zeros)."""
    return Affine(input=x, out_dim=out_dim, name=name, in_dim=in_dim)


@attrs.frozen
class _Bptt:
    """The options of a recurrence's BackpropTruncationComponent (Kaldi's xconfig computes the same)."""

    delay: int
    decay_time: float | None
    clipping_threshold: float
    zeroing_threshold: float
    zeroing_interval: int

    def truncation(self, name: str, x: Layer, dim: int) -> Layer:
        return _Truncation(
            name,
            x,
            dim=dim,
            scale=1.0 if self.decay_time is None else 1.0 - abs(self.delay) / self.decay_time,
            clipping_threshold=float(self.clipping_threshold),
            zeroing_threshold=float(self.zeroing_threshold),
            zeroing_interval=self.zeroing_interval,
            recurrence_interval=abs(self.delay),
        )


@checked_call
def LSTM(
    name: str,
    x: Layer,
    *,
    cell: int,
    projection: int | None = None,
    non_recurrent_projection: int = 0,
    delay: int = -1,
    peepholes: bool = True,
    dropout: float | None = None,
    truncate: bool = False,
    decay_time: float | None = None,
    clipping_threshold: float = 30.0,
    zeroing_threshold: float = 15.0,
    zeroing_interval: int = 20,
) -> Node:
    """An LSTM layer (Kaldi's fast-lstm / fast-lstmp layer): the output Node `name.m`, or `name.rp` when projected.

    `cell`: the cell dim C; `projection`: the recurrent projection dim (None: no projection);
    `non_recurrent_projection`: extra output columns of the projection that do not recur; `delay`: the frame
    the recurrence reads (-1: the previous one; +1: the next one, a backward LSTM). See the module doc.
    """
    in_dim = _check(
        "LSTM", name, x, delay, truncate, decay_time, clipping_threshold, zeroing_threshold, zeroing_interval
    )
    bptt = _Bptt(delay, decay_time, clipping_threshold, zeroing_threshold, zeroing_interval)
    c = _positive("LSTM", "cell", cell)
    if projection is None:
        if non_recurrent_projection:
            raise LayerOptionError(f"LSTM {name!r}: non_recurrent_projection needs projection={at(user_line())}")
        rec = c
    else:
        rec = _positive("LSTM", "projection", projection)
        if non_recurrent_projection != 0:
            _positive("LSTM", "non_recurrent_projection", non_recurrent_projection)
    if not isinstance(peepholes, bool):
        raise LayerOptionError(f"LSTM {name!r}: peepholes must be True or False, got {peepholes!r}{at(user_line())}")
    if dropout is not None and (
        isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1
    ):
        raise LayerOptionError(f"LSTM {name!r}: dropout must be in [0, 1), got {dropout!r}{at(user_line())}")
    nonlin = f"{name}.lstm_nonlin"
    # The recurrent reads: c(t + delay) and r(t + delay), through a truncation node where asked.
    c_now: Layer = Node(f"{name}.c", DimRange(Ref(nonlin), 0, c))
    if projection is None:
        r_now: Layer = Ref(f"{name}.m")  # the output Node below
        trunc = f"{name}.cm_trunc"
    else:
        r_now = Node(f"{name}.r", DimRange(Ref(f"{name}.rp"), 0, rec))
        trunc = f"{name}.cr_trunc"
    if truncate:
        source: Layer = Ref(nonlin) if projection is None else Append(c_now, r_now)
        both = Node(trunc, bptt.truncation(trunc, source, c + rec))
        c_read: Layer = Node(f"{name}.c_trunc", DimRange(both, 0, c))
        r_read: Layer = Node(f"{name}.m_trunc" if projection is None else f"{name}.r_trunc", DimRange(both, c, rec))
    else:
        c_read, r_read = c_now, r_now
    w_all = Node(
        f"{name}.W_all", _affine(f"{name}.W_all", Append(x, IfDefined(Offset(r_read, delay))), in_dim + rec, 4 * c)
    )
    init = Normal((3, c), 1.0)  # Kaldi's LstmNonlinearityComponent: param-stddev 1.0
    params = Weight(init, name=f"{nonlin}.params") if peepholes else FixedWeight(Zeros((3, c)), name=f"{nonlin}.params")
    parts = [w_all, IfDefined(Offset(c_read, delay))]
    if dropout is not None:  # Kaldi's per-frame dropout of the gates i, f, o (its node reads itself: no input)
        mask = f"{name}.dropout_mask"
        parts.append(Node(mask, _DropoutMask(mask, Ref(mask), dim=3, dropout_proportion=float(dropout))))
    cell_out = Node(nonlin, _LstmCell(nonlin, Append(*parts), params, use_dropout=dropout is not None))
    m = Node(f"{name}.m", DimRange(cell_out, c, c))
    if projection is None:
        return m
    return Node(f"{name}.rp", _affine(f"{name}.W_rp", m, c, rec + non_recurrent_projection))


@checked_call
def GRU(
    name: str,
    x: Layer,
    *,
    cell: int,
    projection: int | None = None,
    non_recurrent_projection: int = 0,
    delay: int = -1,
    truncate: bool = False,
    decay_time: float | None = None,
    clipping_threshold: float = 30.0,
    zeroing_threshold: float = 15.0,
    zeroing_interval: int = 20,
) -> Node:
    """A GRU layer (Kaldi's fast-gru layer, or fast-pgru with `projection`): the output Node `name.y_t`.

    With `projection=p` (Kaldi's projected GRU) the recurrent state is `s`, the first `p` columns of
    `y = W_y c + b_y` (`p + non_recurrent_projection` columns), the reset gate has p columns and
    `h = tanh(W_h x + b_h + (r * s_prev) U^T)` with U `[cell, p]`. See the module doc for the math.
    """
    in_dim = _check(
        "GRU", name, x, delay, truncate, decay_time, clipping_threshold, zeroing_threshold, zeroing_interval
    )
    bptt = _Bptt(delay, decay_time, clipping_threshold, zeroing_threshold, zeroing_interval)
    c = _positive("GRU", "cell", cell)
    y: Layer = Ref(f"{name}.y_t")
    if projection is None:
        if non_recurrent_projection:
            raise LayerOptionError(f"GRU {name!r}: non_recurrent_projection needs projection={at(user_line())}")
        rec, kind, state = c, "xh", y
    else:
        rec, kind = _positive("GRU", "projection", projection), "xs"
        if non_recurrent_projection != 0:
            _positive("GRU", "non_recurrent_projection", non_recurrent_projection)
        state = Node(f"{name}.s_t_pre" if truncate else f"{name}.s_t", DimRange(y, 0, rec))
    if truncate:
        state = Node(f"{name}.s_t", bptt.truncation(f"{name}.s_r", state, rec))
    s_prev = IfDefined(Offset(state, delay))
    xs = Append(x, s_prev)
    z = Node(
        f"{name}.z_t",
        _Sigmoid(f"{name}.z", Node(f"{name}.z_t_pre", _affine(f"{name}.W_z.{kind}", xs, in_dim + rec, c)), dim=c),
    )
    r = Node(
        f"{name}.r_t",
        _Sigmoid(f"{name}.r", Node(f"{name}.r_t_pre", _affine(f"{name}.W_r.{kind}", xs, in_dim + rec, rec)), dim=rec),
    )
    hpart = Node(f"{name}.hpart_t", _affine(f"{name}.W_hpart.x", x, in_dim, c))
    w_h = Weight(Normal((c, rec), 1.0 / math.sqrt(rec)), name=f"{name}.gru_nonlin.w_h")
    if projection is None:
        nonlin = Node(f"{name}.gru_nonlin_t", _GruCell(f"{name}.gru_nonlin", Append(z, r, hpart, s_prev), w_h))
        return Node(f"{name}.y_t", DimRange(nonlin, c, c))
    c_prev = IfDefined(Offset(Ref(f"{name}.c_t"), delay))
    nonlin = Node(f"{name}.gru_nonlin_t", _GruCell(f"{name}.gru_nonlin", Append(z, r, hpart, c_prev, s_prev), w_h))
    c_t = Node(f"{name}.c_t", DimRange(nonlin, c, c))
    return Node(f"{name}.y_t", _affine(f"{name}.W_y.c", c_t, c, rec + non_recurrent_projection))


@checked_call
def Bidirectional(layer: Callable[..., Layer], name: str, x: Layer, **options: Any) -> Layer:
    """`Append(layer(name.forward, x, delay=-1, ...), layer(name.backward, x, delay=+1, ...))`: a recurrent layer
    run forward and backward in time, outputs appended (a BLSTM with `layer=LSTM`)."""
    if "delay" in options:
        raise LayerOptionError(
            f"Bidirectional {name!r}: the delay is -1 forward and +1 backward; give no delay={at(user_line())}"
        )
    if "delay" not in inspect.signature(layer).parameters:
        raise LayerOptionError(
            f"Bidirectional {name!r}: {getattr(layer, '__name__', layer)!r} takes no delay=; give a recurrent "
            f"layer (LSTM, GRU){at(user_line())}"
        )
    return Append(layer(f"{name}.forward", x, delay=-1, **options), layer(f"{name}.backward", x, delay=1, **options))
