"""Kaldi's self-repair of RectifiedLinear, Sigmoid and Tanh components, applied in training.

Over a training job Kaldi's NonlinearComponents count the rows they ran and sum
their derivative per dimension (`StoreStats`; with `block-dim` below `dim`, per
dimension of a block, over the blocks). In `Backprop`, `RepairGradients` adds a
term to the input derivative of each dimension whose average derivative is out
of range, pushing its inputs back to where the nonlinearity has a slope
(nnet-simple-component.cc), with `s` the component's `self-repair-scale` and
`y` its output:

- RectifiedLinear: `+s` where the average is at most the lower threshold (0.05),
  `-s` where it is above the upper one (0.95), on every row;
- Sigmoid: `s * (1 - 2 y)` where the average is below the lower threshold (0.05);
- Tanh: `-s * y` where the average is below the lower threshold (0.2).

Kaldi stores statistics on a random half of the minibatches (always on the
first) and repairs on a random half with `2 s`; symnet does both on every
minibatch with `s`: the same in expectation, without random numbers. The
derivative is the objective's in Kaldi's units (summed over frames); `fit`'s
gradient is of the mean loss, so the term enters its backward as
`-term / frames`. A `fit` run is one Kaldi training job: the statistics start at
zero (nnet3-train's `--zero-component-stats`) and the Kaldi rules' optimiser
state carries them from step to step.

Inside `repairing(...)` the engine computes each repaired component's step
through `step_apply` (symnet._src.core.layer), whose backward adds the term and
which records the step's statistics. A component computed inside a
recurrence's loop is not repaired; the step says so (`missing`).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from ..base.errors import TrainingError
from ..core.precision import wide
from .normalize import minibatch_sums

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
else:
    from ..core.lazyjax import jax, jnp

__all__ = ["RepairSpec", "Repairing", "repair_specs", "repairing", "zero_statistics"]

#: Kaldi's "unset" threshold (kUnsetThreshold): the type's default applies.
_UNSET = -1000.0
#: Per Kaldi type: the default lower and upper thresholds of the average derivative (None: no upper one).
_DEFAULTS: dict[str, tuple[float, float | None]] = {
    "RectifiedLinearComponent": (0.05, 0.95),
    "SigmoidComponent": (0.05, None),
    "TanhComponent": (0.2, None),
}


class RepairSpec(NamedTuple):
    """One self-repairing component: its Kaldi type, `block_dim`, scale and thresholds."""

    kind: str
    block_dim: int
    scale: float
    lower: float
    upper: float | None


def repair_specs(components: Any) -> dict[str, RepairSpec]:
    """The self-repairing components among `components` (layers), by name: RectifiedLinear, Sigmoid and Tanh
    components with a `self-repair-scale` above zero. A scale of 0.1 or more, or an upper threshold on a
    Sigmoid or Tanh, is a `TrainingError` (Kaldi asserts and stops there)."""
    out: dict[str, RepairSpec] = {}
    for c in components:
        kind = getattr(c, "kaldi_type", None)
        if kind not in _DEFAULTS or c.name in out:
            continue
        scale = float(c.option("self-repair-scale", 0.0))
        if scale == 0.0:
            continue
        if not 0.0 < scale < 0.1:
            raise TrainingError(f"{c.name}: self-repair-scale={scale} must be in (0, 0.1), as Kaldi asserts")
        lower_default, upper_default = _DEFAULTS[kind]
        lower = float(c.option("self-repair-lower-threshold", _UNSET))
        upper = float(c.option("self-repair-upper-threshold", _UNSET))
        if upper_default is None and upper != _UNSET:
            raise TrainingError(f"{c.name}: a {kind} has no self-repair-upper-threshold (Kaldi stops on it)")
        out[c.name] = RepairSpec(
            kind,
            int(c.option("block-dim", c.dim)),
            scale,
            lower_default if lower == _UNSET else lower,
            upper_default if upper == _UNSET else upper,
        )
    return out


def zero_statistics(specs: Mapping[str, RepairSpec]) -> dict[str, tuple[jax.Array, jax.Array]]:
    """Each component's statistics at the start of a job: (rows counted, derivative sums per block dimension)."""
    return {
        name: (jnp.zeros((), jnp.float32), jnp.zeros((spec.block_dim,), jnp.float32)) for name, spec in specs.items()
    }


class Repairing:
    """One training step's self-repair: the specs, the statistics carried in, the factor turning a term in
    Kaldi's units into the step's delta (`delta_scale`), and the statistics after the step's forward pass
    (`statistics`: only the components the step computed)."""

    def __init__(
        self,
        specs: Mapping[str, RepairSpec],
        carried: Mapping[str, tuple[jax.Array, jax.Array]],
        delta_scale: jax.Array,
    ):
        self.specs = specs
        self.carried = carried
        self.delta_scale = delta_scale
        self.statistics: dict[str, tuple[jax.Array, jax.Array]] = {}

    def missing(self) -> list[str]:
        """The repairing components this step did not compute as whole steps (inside a recurrence's loop)."""
        return sorted(set(self.specs) - set(self.statistics))

    def after(self) -> dict[str, tuple[jax.Array, jax.Array]]:
        """Every component's statistics after the step (the carried ones where it did not run)."""
        return {**self.carried, **self.statistics}

    def step(self, layer: Any, x: jax.Array) -> tuple[jax.Array, Any]:
        """`layer`'s value on `x` (rows in any layout, columns last) and the pullback that adds the repair term."""
        from ..engine.values_only import linearized  # imports jax: not at module import (`symnet info` needs none)

        spec = self.specs[layer.name]
        y = layer.apply(x)
        deriv = _derivative(spec.kind, y.astype(wide(y.dtype)))
        sums, _, rows = minibatch_sums(deriv.reshape(-1, spec.block_dim))
        count, total = self.statistics.get(layer.name, self.carried[layer.name])
        count, total = count + jnp.asarray(rows, jnp.float32), total + sums.astype(jnp.float32)
        self.statistics[layer.name] = (count, total)
        a, b = _term(spec, total / jnp.maximum(count, 1.0))
        a, b = a * self.delta_scale, b * self.delta_scale
        repaired = _repaired(layer, spec.block_dim)
        return linearized(lambda v: repaired(v, a, b), x)


_ACTIVE: contextvars.ContextVar[Repairing | None] = contextvars.ContextVar("symnet_self_repair", default=None)


@contextlib.contextmanager
def repairing(
    specs: Mapping[str, RepairSpec], carried: Mapping[str, tuple[jax.Array, jax.Array]], delta_scale: jax.Array
) -> Iterator[Repairing]:
    """Self-repair for the steps computed inside the block (a training step's forward and backward)."""
    state = Repairing(specs, carried, delta_scale)
    token = _ACTIVE.set(state)
    try:
        yield state
    finally:
        _ACTIVE.reset(token)


def step_apply(layer: Any, x: jax.Array) -> tuple[jax.Array, Any] | None:
    """A nonlinear component's `step_apply`: its repairing step inside `repairing(...)` when it repairs."""
    state = _ACTIVE.get()
    if state is None or layer.name not in state.specs:
        return None
    return state.step(layer, x)


def _derivative(kind: str, y: jax.Array) -> jax.Array:
    """The nonlinearity's derivative from its output, as Kaldi's StoreStats computes it."""
    if kind == "RectifiedLinearComponent":
        return (y > 0).astype(y.dtype)
    if kind == "SigmoidComponent":
        return y * (1.0 - y)
    return 1.0 - y * y


def _term(spec: RepairSpec, average: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per block dimension `(a, b)`: the term `a + b * y` of the input delta of `fit`'s loss (Kaldi's term negated:
    the loss falls where Kaldi's objective rises), before the step's scale."""
    s = spec.scale
    if spec.kind == "RectifiedLinearComponent":
        assert spec.upper is not None
        low = (average <= spec.lower).astype(jnp.float32)
        high = (average > spec.upper).astype(jnp.float32)
        return -s * (low - high), jnp.zeros_like(average)
    problem = (average < spec.lower).astype(jnp.float32)
    if spec.kind == "SigmoidComponent":  # Kaldi: + s (1 - 2 y)
        return -s * problem, 2.0 * s * problem
    return jnp.zeros_like(average), s * problem  # Tanh, Kaldi: - s y


def _repaired(layer: Any, block_dim: int) -> Any:
    """`layer.apply` whose backward adds `a + b * y` (per block dimension) to the input delta."""

    @jax.custom_vjp
    def f(x: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
        return layer.apply(x)

    def fwd(x: jax.Array, a: jax.Array, b: jax.Array) -> tuple[jax.Array, Any]:
        y = layer.apply(x)
        return y, (x, y, a, b)

    def bwd(res: Any, d: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        x, y, a, b = res
        (dx,) = layer.vjp(d, y, x)
        blocks = y.reshape(y.shape[:-1] + (-1, block_dim))
        term = (a + b * blocks.astype(a.dtype)).reshape(y.shape)
        return dx + term.astype(dx.dtype), jnp.zeros_like(a), jnp.zeros_like(b)

    f.defvjp(fwd, bwd)
    return f
