"""Kaldi's training-time rules, read from the network itself: `kaldi_rules(network, ...)`.

Kaldi keeps the options that shape its training on the components
(`learning-rate-factor`, `max-change`, `l2-regularize`,
`orthonormal-constraint`) and applies them in its trainer (`NnetTrainer::
TrainInternal`, nnet-training.cc, and the functions it calls in
nnet-utils.cc). This module is the one place that turns those options into
that behaviour, written from Kaldi's source:

1. the delta of each updatable component is its learning rate (the global
   rate times its `learning-rate-factor`, as `nnet3-copy --learning-rate`
   sets it) times the gradient of the objective summed over the minibatch's
   frames;
2. `ApplyL2Regularization`: `delta += -2 * l2-regularize * lr * N *
   l2_regularize_factor * params`, N the number of sequences (chunks) in the
   minibatch (`GetNumNvalues`);
3. with `momentum`, the delta is kept and scaled by the momentum after each
   update, and applied times `1 - momentum`;
4. `UpdateNnetWithMaxChange`: per component `s_c = min(1, max-change /
   (|delta_c| (1 - momentum)))` (only where max-change > 0), then over the
   whole network `|update| = sqrt(sum s_c^2 |delta_c|^2) (1 - momentum)`
   is limited to `max_param_change` by one more factor; an infinite change is
   not applied at all;
5. `ScaleBatchnormStats`: the stored batch-norm statistics are scaled by
   `batchnorm_stats_scale` (0.8) after every minibatch (in mean/variance form:
   the count);
6. `ConstrainOrthonormal`: each LinearComponent, AffineComponent (and
   NaturalGradientAffineComponent) and TdnnComponent with a nonzero
   `orthonormal-constraint` is, on a random one minibatch in four
   (`RandInt(0, 3) == 0` per component), moved towards a matrix with
   orthonormal rows times the constraint: with P = M M^T (M with rows <= columns,
   else its transpose), `M -= 4 (nu / s^2) (P - s^2 I) M`, nu = 1/8; a negative
   constraint lets s float, `s^2 = tr(P P) / tr(P)`, with nu halved when
   `tr(P P) dim / tr(P)^2 > 1.02` and again when `> 1.1`, and no update when
   `tr(P) < 1e-15`.

Steps 1-4 are an optax `GradientTransformationExtraArgs` (`KaldiRules`);
steps 5 and 6 are `KaldiRules.after_update`, to call after
`optax.apply_updates`. Each component's options are read by
`symnet._src.train.component_rules`; Kaldi's `--trainer.dropout-schedule` is
`symnet._src.train.dropout_schedule`. Kaldi's self-repair of RectifiedLinear,
Sigmoid and Tanh components changes the backward pass itself: `fit`'s step
applies it (symnet._src.components.self_repair) and this state carries its
statistics. `fit` applies all of it (see docs/training.md).
"""

from __future__ import annotations

import math
import warnings
import zlib
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from ..base.errors import TrainingError
from ..components import BatchNormComponent, self_repair
from ..components import natural_gradient as ng_lib
from ..core.layer import Weight
from ..core.walk import walk
from .component_rules import ComponentRule, KaldiRulesWarning, component_rules, network_roots, warn_unhonoured
from .dropout_schedule import DROPOUT_TYPES, DropoutSchedule

__all__ = ["KaldiRules", "KaldiRulesState", "constrain_orthonormal", "kaldi_rules", "zero_repair_statistics"]

#: nnet3-train's defaults (NnetTrainerOptions, nnet-training.h).
MAX_PARAM_CHANGE = 2.0
BATCHNORM_STATS_SCALE = 0.8
#: ConstrainOrthonormal's chance that a component is constrained after a minibatch (`RandInt(0, 3) == 0`).
ORTHONORMAL_PROBABILITY = 0.25


# ----- ConstrainOrthonormal ---------------------------------------------------------------------------


def constrain_orthonormal(matrix: jax.Array, constraint: float) -> jax.Array:
    """One step of Kaldi's ConstrainOrthonormalInternal on `matrix` (transposed when it has more rows than
    columns): towards orthonormal rows times `constraint`, or times a floating scale when it is negative."""
    if constraint == 0.0:
        return matrix
    if matrix.ndim != 2:
        raise TrainingError(f"orthonormal-constraint needs a matrix, got shape {matrix.shape}")
    if matrix.shape[0] > matrix.shape[1]:
        return constrain_orthonormal(matrix.T, constraint).T
    m = matrix
    p = m @ m.T
    speed = jnp.asarray(0.125, m.dtype)
    if constraint < 0.0:
        trace_p = jnp.trace(p)
        trace_pp = jnp.sum(p * p)
        scale_sq = trace_pp / trace_p
        ratio = trace_pp * p.shape[0] / (trace_p * trace_p)
        speed = jnp.where(ratio > 1.02, jnp.where(ratio > 1.1, 0.125 * 0.25, 0.125 * 0.5), speed)
        skip = trace_p < 1.0e-15
    else:
        scale_sq = jnp.asarray(constraint * constraint, m.dtype)
        skip = jnp.asarray(False)
    q = p - scale_sq * jnp.eye(p.shape[0], dtype=m.dtype)
    alpha = speed / scale_sq
    updated = m + (-4.0 * alpha) * (q @ m)
    return jnp.where(skip, m, updated)


# ----- the optax transformation ---------------------------------------------------------------------


class KaldiRulesState(NamedTuple):
    """`kaldi_rules`' optimiser state: the number of updates (for a learning-rate schedule), Kaldi's delta kept
    for momentum (None without), the wrapped optimiser's state (None without one), and the self-repairing
    components' statistics (None without any: `self_repair.zero_statistics`)."""

    step: jax.Array
    delta: Any
    inner: Any
    repair: Any = None


def zero_repair_statistics(opt_state: Any) -> Any:
    """`opt_state` with the self-repair statistics of every `KaldiRulesState` in it set to zero (a new job)."""

    def zeroed(node: Any) -> Any:
        if isinstance(node, KaldiRulesState) and node.repair is not None:
            return node._replace(repair=jax.tree.map(lambda v: v * 0, node.repair))
        return node

    return jax.tree.map(zeroed, opt_state, is_leaf=lambda node: isinstance(node, KaldiRulesState))


def _learning_rate(value: Any) -> Callable[[jax.Array], Any] | None:
    if value is None:
        return None
    if callable(value):
        return value  # an optax schedule: step count -> rate
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0.0:
        raise TrainingError(f"learning_rate must be a number >= 0, an optax schedule or None, got {value!r}")
    rate = float(value)
    return lambda count: rate


class KaldiRules(optax.GradientTransformationExtraArgs):
    """Kaldi's training rules for one network: an optax `GradientTransformationExtraArgs` (`init`, `update`),
    plus `after_update` (batch-norm statistics, orthonormal constraints), `dropout` (a dropout schedule)
    and `rules` (each component's). Made by `kaldi_rules`.

    `update(grads, state, params, *, frames=None, sequences=None, repair=None)`: `frames` is the minibatch's total frame
    weight when `grads` is the gradient of the mean loss (as `fit` and `symnet.train.objective` compute
    it); omitted, `grads` is the gradient of the loss summed over frames, Kaldi's objective. `sequences`
    is the number of sequences (chunks) in the minibatch, which Kaldi's l2 term is proportional to;
    required when a component has l2-regularize. `repair` is the self-repair statistics after the step
    (`repairing(...)`'s `after()`), which the step's backward needs for Kaldi's self-repair.
    """

    # Set once by `kaldi_rules` (a NamedTuple subclass has a __dict__ for them).
    settings: dict[str, Any]
    rules: tuple[ComponentRule, ...]
    self_repair: dict[str, self_repair.RepairSpec]
    schedule: DropoutSchedule | None
    _rebuild: Callable[..., KaldiRules]

    def repair_statistics(self, state: Any) -> Any:
        """The self-repair statistics in `state` (this transformation's state, or natural gradient's around it)."""
        return (state.inner if isinstance(state, ng_lib.NaturalGradientState) else state).repair

    def repairing(self, state: Any, frames: Any, loss_scale: Any = 1.0) -> Any:
        """Kaldi's self-repair for one training step's forward and backward pass, run inside this context
        (`state`: this transformation's state; `frames`: the minibatch's total frame weight, which the loss's
        mean divides by; `loss_scale`: what the loss's derivative is scaled by). It yields the step's
        `Repairing`, whose `after()` is `update`'s `repair=` argument."""
        return self_repair.repairing(
            self.self_repair,
            self.repair_statistics(state) or {},
            jnp.asarray(loss_scale, jnp.float32) / jnp.maximum(jnp.asarray(frames, jnp.float32), 1.0),
        )

    def after_update(self, params: Mapping[str, Any], state: Mapping[str, Any], key: jax.Array | None) -> tuple:
        """`(params, state)` after a minibatch's update, as Kaldi's trainer leaves them: batch-norm statistics
        scaled (ScaleBatchnormStats) and orthonormal constraints applied (ConstrainOrthonormal; with `key`,
        each constrained component on a random one minibatch in four, drawn from `key` and its name; with
        `key=None` on every call). Jittable."""
        return self.constrain(params, key), self.scale_batchnorm_stats(state)

    def constrain(self, params: Mapping[str, Any], key: jax.Array | None) -> dict[str, Any]:
        """`params` with Kaldi's ConstrainOrthonormal applied (see `after_update`)."""
        out = dict(params)
        for rule in self.rules:
            if rule.orthonormal_param is None:
                continue
            name = rule.orthonormal_param
            value = out[name]

            def constrained(m: jax.Array, c: float = rule.orthonormal_constraint) -> jax.Array:
                return constrain_orthonormal(m, c)

            if key is None:
                out[name] = constrained(value)
            else:
                draw = jax.random.fold_in(key, zlib.crc32(f"orthonormal-constraint {rule.name}".encode()))
                now = jax.random.uniform(draw) < ORTHONORMAL_PROBABILITY
                out[name] = jax.lax.cond(now, constrained, lambda m: m, value)
        return out

    def scale_batchnorm_stats(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """`state` with every batch-norm's statistics scaled by `batchnorm_stats_scale` (its count: the
        mean and variance are unchanged), as Kaldi's ScaleBatchnormStats after every minibatch."""
        scale = self.settings["batchnorm_stats_scale"]
        out = dict(state)
        if scale == 1.0:
            return out
        for name in self.settings["batchnorm_counts"]:
            if name in out:
                out[name] = out[name] * jnp.asarray(scale, out[name].dtype)
        return out

    def dropout(self, fraction: float) -> dict[str, float]:
        """The dropout proportions of the schedule after `fraction` of the training data (component name ->
        proportion); empty without a schedule."""
        if self.schedule is None:
            return {}
        return self.schedule.for_components(self.settings["dropout_components"], fraction)

    def with_natural_gradient(self, network: Any = None, *, dtype: Any = jnp.float32) -> KaldiRules:
        """The same rules with Kaldi's natural gradient for the NaturalGradient* components
        (`symnet.natural_gradient.optimizer(rules, network)` gives this)."""
        return self._rebuild(natural_gradient=True, dtype=dtype)

    def describe(self) -> dict[str, Any]:
        """The settings as plain values (recorded in `fit`'s checkpoints)."""
        out = {k: v for k, v in self.settings.items() if k in _DESCRIBED}
        out["dropout_schedule"] = self.schedule.text if self.schedule is not None else None
        return out


_DESCRIBED = (
    "learning_rate",
    "max_param_change",
    "l2_regularize_factor",
    "momentum",
    "batchnorm_stats_scale",
    "natural_gradient",
    "optimizer",
)


def kaldi_rules(
    network: Any,
    learning_rate: Any = None,
    *,
    optimizer: optax.GradientTransformation | None = None,
    max_param_change: float = MAX_PARAM_CHANGE,
    l2_regularize_factor: float = 1.0,
    momentum: float = 0.0,
    batchnorm_stats_scale: float = BATCHNORM_STATS_SCALE,
    dropout_schedule: str | DropoutSchedule | None = None,
    natural_gradient: bool = False,
    dtype: Any = jnp.float32,
) -> KaldiRules:
    """Kaldi's training rules for `network` (a Network), from its components' options.

    As nnet3-train (Kaldi's SGD): with `learning_rate` (a number or an optax schedule of the step) each
    component's rate is it times the component's learning-rate-factor (`nnet3-copy --learning-rate`);
    with neither `learning_rate` nor `optimizer`, each component's stored `learning-rate` (the model as it
    is, as nnet3-train takes it). Around your own optimiser: `optimizer=optax.adam(1e-3)` gets the
    gradients with the l2 term added (in the gradient's units) and its updates are scaled by each
    component's learning-rate-factor, then limited by max-change and max-param-change.

    `max_param_change`, `l2_regularize_factor` and `momentum` are nnet3-train's options of those names
    (its defaults; Kaldi's scripts pass `l2_regularize_factor = 1 / num_jobs`), `batchnorm_stats_scale` is
    its `--batchnorm-stats-scale`, `dropout_schedule` the scripts' `--trainer.dropout-schedule`
    (`DropoutSchedule`), `natural_gradient` trains the NaturalGradient* components with Kaldi's natural
    gradient (`symnet.natural_gradient`). A component option the rules do not apply (self-repair, natural
    gradient where it is off or not implemented) is a `KaldiRulesWarning` naming the components.
    """
    if learning_rate is not None and optimizer is not None:
        raise TrainingError("give kaldi_rules a learning_rate (Kaldi's SGD) or an optimizer to wrap, not both")
    if optimizer is not None and not (callable(getattr(optimizer, "init", None)) and callable(optimizer.update)):
        raise TrainingError(f"optimizer must be an optax GradientTransformation, got {optimizer!r:.60}")
    for name, value, low, high in (
        ("max_param_change", max_param_change, 0.0, math.inf),
        ("l2_regularize_factor", l2_regularize_factor, 0.0, math.inf),
        ("momentum", momentum, 0.0, 1.0),
        ("batchnorm_stats_scale", batchnorm_stats_scale, 0.0, 1.0),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise TrainingError(f"{name} must be a number in [{low}, {high}], got {value!r}")
    if momentum == 1.0:
        raise TrainingError("momentum must be below 1 (Kaldi applies each update times 1 - momentum)")
    rate = _learning_rate(learning_rate)
    if isinstance(network, KaldiRules):
        raise TrainingError("kaldi_rules takes the network, not another kaldi_rules(...)")
    rules = component_rules(network)
    if rate is None and optimizer is None:
        missing = [r.name for r in rules if any(v is None for v in r.rates)]
        if missing:
            raise TrainingError(
                f"kaldi_rules without a learning_rate uses each component's stored learning-rate, but "
                f"{', '.join(missing[:5])} {'has' if len(missing) == 1 else 'have'} none: give learning_rate="
            )
    schedule = DropoutSchedule.parse(dropout_schedule) if isinstance(dropout_schedule, str) else dropout_schedule
    if schedule is not None and not isinstance(schedule, DropoutSchedule):
        raise TrainingError(f"dropout_schedule must be a string or a DropoutSchedule, got {dropout_schedule!r:.60}")
    layers = walk(network_roots(network))
    dropout_components = sorted({c.name for c in layers if isinstance(c, DROPOUT_TYPES)})
    if schedule is not None:
        schedule.check(dropout_components)
    counts = sorted(
        {
            c.count.name
            for c in layers
            if isinstance(c, BatchNormComponent) and isinstance(c.count, Weight) and c.count.name
        }
    )

    inner = optimizer if optimizer is not None else optax.identity()
    if natural_gradient:
        inner = ng_lib.optimizer(inner, network, dtype=dtype)
    natural: set[str] = set()
    probe = jax.eval_shape(inner.init, network.params)
    if isinstance(probe, ng_lib.NaturalGradientState):
        natural = set(ng_lib.components(network))
    repairs = self_repair.repair_specs(layers)
    warn_unhonoured(network, natural, set(repairs))
    transformation = _transformation(
        rules,
        optax.with_extra_args_support(inner),
        rate,
        max_param_change=float(max_param_change),
        l2_factor=float(l2_regularize_factor),
        momentum=float(momentum),
        wraps=optimizer is not None,
        repairs=repairs,
    )
    out = KaldiRules(*transformation)
    out.settings = {
        "learning_rate": "schedule" if callable(learning_rate) else learning_rate,
        "optimizer": None if optimizer is None else "given",
        "max_param_change": float(max_param_change),
        "l2_regularize_factor": float(l2_regularize_factor),
        "momentum": float(momentum),
        "batchnorm_stats_scale": float(batchnorm_stats_scale),
        "natural_gradient": bool(natural),
        "batchnorm_counts": tuple(counts),
        "dropout_components": tuple(dropout_components),
        "params": frozenset(network.params),
    }
    out.rules = rules
    out.schedule = schedule
    out.self_repair = repairs

    def rebuild(**changes: Any) -> KaldiRules:
        args: dict[str, Any] = {
            "optimizer": optimizer,
            "max_param_change": max_param_change,
            "l2_regularize_factor": l2_regularize_factor,
            "momentum": momentum,
            "batchnorm_stats_scale": batchnorm_stats_scale,
            "dropout_schedule": schedule,
            "natural_gradient": natural_gradient,
            "dtype": dtype,
            **changes,
        }
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", KaldiRulesWarning)  # said once already
            return kaldi_rules(network, learning_rate, **args)

    out._rebuild = rebuild
    return out


def _transformation(
    rules: tuple[ComponentRule, ...],
    inner: optax.GradientTransformationExtraArgs,
    rate: Callable[[jax.Array], Any] | None,
    *,
    max_param_change: float,
    l2_factor: float,
    momentum: float,
    wraps: bool,
    repairs: Mapping[str, self_repair.RepairSpec],
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """`(init, update)` of steps 1-4 (see the module doc)."""
    uses_l2 = l2_factor > 0.0 and any(r.l2_regularize > 0.0 for r in rules)

    def init(params: Any) -> Any:
        inner_state = inner.init(params)
        delta = {k: jnp.zeros_like(v) for k, v in params.items()} if momentum > 0.0 else None
        repair = self_repair.zero_statistics(repairs) if repairs else None
        own = KaldiRulesState(jnp.zeros((), jnp.int32), delta, None, repair)
        if isinstance(inner_state, ng_lib.NaturalGradientState):
            # Kept outermost, where fit's training step finds the preconditioners.
            return inner_state._replace(inner=own._replace(inner=inner_state.inner))
        return own._replace(inner=inner_state)

    def update(
        grads: Any,
        state: Any,
        params: Any = None,
        *,
        frames: Any = None,
        sequences: Any = None,
        repair: Any = None,
        **extra: Any,
    ) -> tuple[Any, Any]:
        natural = isinstance(state, ng_lib.NaturalGradientState)
        own: KaldiRulesState = state.inner if natural else state
        if set(grads) != {n for r in rules for n in r.params}:
            raise TrainingError(
                "kaldi_rules was made for a network with other parameters: make it with kaldi_rules(network)"
            )
        if uses_l2:
            if params is None:
                raise TrainingError("kaldi_rules with l2-regularize needs the parameters: update(grads, state, params)")
            if sequences is None:
                raise TrainingError(
                    "kaldi_rules with l2-regularize needs sequences= (the minibatch's number of sequences, which "
                    "Kaldi's l2 term is proportional to): update(grads, state, params, frames=..., sequences=...)"
                )
        scale_f = jnp.asarray(1.0 if frames is None else frames, jnp.float32)
        n_seq = jnp.asarray(0.0 if sequences is None else sequences, jnp.float32)
        lr = rate(own.step) if rate is not None else None

        def l2_coefficient(rule: ComponentRule) -> Any:
            # ApplyL2Regularization: delta += -2 * l2_regularize_factor * N * lr * l2 * params.
            return 2.0 * l2_factor * rule.l2_regularize * n_seq

        if wraps:
            # Your optimiser on the gradient with the l2 term (in its units), then the learning-rate factors.
            shaped = dict(grads)
            if uses_l2:
                for rule in rules:
                    if rule.l2_regularize > 0.0:
                        for name, f in zip(rule.params, rule.factors):
                            ratio = rule.factor / f if f > 0.0 else 0.0
                            shaped[name] = grads[name] + (l2_coefficient(rule) * ratio / scale_f) * params[name]
            inner_state = state._replace(inner=own.inner) if natural else own.inner
            updates, inner_state = inner.update(shaped, inner_state, params, **extra)
            new_inner = inner_state.inner if natural else inner_state
            delta = {}
            for rule in rules:
                for name, f in zip(rule.params, rule.factors):
                    delta[name] = updates[name] if f == 1.0 else updates[name] * f
        else:
            # Kaldi's SGD: the identity (or natural gradient) leaves the gradient as it is.
            inner_state = state._replace(inner=own.inner) if natural else own.inner
            plain, inner_state = inner.update(grads, inner_state, params, **extra)
            new_inner = inner_state.inner if natural else inner_state
            delta = {}
            for rule in rules:
                group_rate = lr * rule.factor if lr is not None else rule.rate
                for name, stored, f in zip(rule.params, rule.rates, rule.factors):
                    rate_p: Any = lr * f if lr is not None else stored
                    d = (-rate_p * scale_f) * plain[name]
                    if uses_l2 and rule.l2_regularize > 0.0:
                        d = d - (l2_coefficient(rule) * group_rate) * params[name]
                    delta[name] = d
        if momentum > 0.0:  # Kaldi's delta_nnet, scaled by the momentum after the last update, adds this one
            delta = {k: own.delta[k] + v for k, v in delta.items()}
        updates, applied = _max_change(rules, delta, 1.0 - momentum, max_param_change)
        kept = None
        if momentum > 0.0:
            kept = {k: jnp.where(applied, momentum * v, jnp.zeros_like(v)) for k, v in delta.items()}
        if repairs and repair is None:
            warnings.warn(
                f"Kaldi's training rules: self-repair of {', '.join(sorted(repairs)[:3])}"
                f"{' and more' if len(repairs) > 3 else ''} is applied by fit's training step, which changes the "
                "backward pass; this update (without repair=) leaves it out",
                KaldiRulesWarning,
                stacklevel=2,
            )
        new_own = KaldiRulesState(
            own.step + 1, kept, new_inner, repair if repairs and repair is not None else own.repair
        )
        if natural:
            return updates, inner_state._replace(inner=new_own)
        return updates, new_own

    return init, update


def _max_change(
    rules: tuple[ComponentRule, ...], delta: Mapping[str, Any], scale: float, max_param_change: float
) -> tuple[dict[str, Any], Any]:
    """UpdateNnetWithMaxChange: the update `scale * s_c * delta_c` (and whether it is applied at all)."""
    factors, total = [], jnp.zeros((), jnp.float32)
    for rule in rules:
        dot = sum((jnp.sum(jnp.square(delta[n])) for n in rule.params), jnp.zeros((), jnp.float32))
        norm = jnp.sqrt(dot) * abs(scale)
        if rule.max_change > 0.0:
            s = jnp.where(norm > rule.max_change, rule.max_change / norm, 1.0)
        else:
            s = jnp.ones((), jnp.float32)
        factors.append(s)
        total = total + s * s * dot
    param_delta = jnp.sqrt(total) * abs(scale)
    applied = jnp.asarray(True)
    global_scale = jnp.asarray(scale, jnp.float32)
    if max_param_change > 0.0:
        limit = param_delta > max_param_change
        infinite = ~jnp.isfinite(param_delta)
        applied = ~(limit & infinite)  # "Infinite parameter change, will not apply."
        global_scale = jnp.where(limit & ~infinite, global_scale * max_param_change / param_delta, global_scale)
    updates = {}
    for rule, s in zip(rules, factors):
        for name in rule.params:
            d = delta[name]
            updates[name] = jnp.where(applied, (global_scale * s).astype(d.dtype) * d, jnp.zeros_like(d))
    return updates, applied
