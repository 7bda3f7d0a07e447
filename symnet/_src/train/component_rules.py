"""Kaldi's training options as each updatable component keeps them (`learning-rate-factor`, `max-change`,
`l2-regularize`, `orthonormal-constraint`), read from a network: `component_rules`, and the options that
symnet's rules do not apply, warned about by name (`KaldiRulesWarning`)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from ..base.errors import TrainingError
from ..components.base import Component
from ..components.structure import CompositeComponent
from ..core.layer import Layer, Weight
from ..core.walk import walk

__all__ = [
    "ComponentRule",
    "KaldiRulesWarning",
    "carries_kaldi_rules",
    "component_rules",
    "network_roots",
    "warn_unhonoured",
]

#: The Kaldi types ConstrainOrthonormal constrains, and the parameter it constrains.
ORTHONORMAL_PARAM = {
    "LinearComponent": "params",
    "AffineComponent": "linear_params",
    "NaturalGradientAffineComponent": "linear_params",
    "TdnnComponent": "linear_params",
}


class KaldiRulesWarning(UserWarning):
    """A Kaldi training option of a component that symnet's rules do not apply (named in the message)."""


@attrs.frozen
class ComponentRule:
    """What Kaldi's trainer does with one updatable component (or one parameter outside any component).

    `params` are its parameter names; `rates` each one's learning rate as the component stores it (Kaldi's
    `LearningRate()`, None where there is none) and `factors` each one's learning-rate factor (inside a
    CompositeComponent, the composite's times the part's, as SetUnderlyingLearningRate multiplies them);
    `rate` and `factor` are the component's own (they scale its l2 term).
    """

    name: str
    kaldi_type: str
    params: tuple[str, ...]
    rates: tuple[float | None, ...]
    factors: tuple[float, ...]
    rate: float | None = None
    factor: float = 1.0
    max_change: float = 0.0
    l2_regularize: float = 0.0
    orthonormal_constraint: float = 0.0
    orthonormal_param: str | None = None

    @property
    def shapes_the_update(self) -> bool:
        """Whether any of its options changes training (max-change, l2, a factor, a constraint)."""
        return bool(
            self.max_change > 0.0
            or self.l2_regularize > 0.0
            or self.orthonormal_constraint != 0.0
            or any(f != 1.0 for f in self.factors)
        )


def _option(c: Component, key: str, default: Any) -> Any:
    value = c.option(key, default)
    return default if value is None else value


def _number(c: Component, key: str, default: float) -> float:
    value = _option(c, key, default)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TrainingError(f"component {c.name!r} ({c.kaldi_type}): option {key}={value!r} is not a number") from None
    if not math.isfinite(number) or (key != "orthonormal-constraint" and number < 0.0):
        raise TrainingError(f"component {c.name!r} ({c.kaldi_type}): option {key}={value!r} must be >= 0")
    return number


def _own_weights(c: Component, params: Mapping[str, Any]) -> list[str]:
    return [w.name for w in c.parameters.values() if isinstance(w, Weight) and w.name is not None and w.name in params]


def network_roots(network: Any) -> list[Layer]:
    """The output layers of `network` (a Network; TrainingError for anything else)."""
    structure = getattr(network, "structure", None)
    if structure is None:
        raise TrainingError(f"Kaldi's rules are read from a Network, not a {type(network).__name__}")
    return [layer for _, layer in structure.outputs]


def component_rules(network: Any) -> tuple[ComponentRule, ...]:
    """The rules of every updatable component of `network` (a Network), in the order the
    network's walk meets them, then one for each parameter outside any component (Kaldi's defaults: no
    max-change, no l2, factor 1). A component used by several nodes is one rule.

    TrainingError for an orthonormal-constraint where Kaldi does not apply one (a type other than
    LinearComponent, AffineComponent, NaturalGradientAffineComponent, TdnnComponent) or on a parameter that
    is not trained.
    """
    params = network.params
    layers = walk(network_roots(network))
    parts = {id(p) for layer in layers if isinstance(layer, CompositeComponent) for p in layer.parts}
    rules: dict[str, ComponentRule] = {}
    owner: dict[str, str] = {}
    for c in layers:
        if not isinstance(c, Component) or id(c) in parts or c.name in rules:
            continue
        rate = _option(c, "learning-rate", None)
        rate = None if rate is None else _number(c, "learning-rate", 0.001)
        factor = _number(c, "learning-rate-factor", 1.0)
        names, rates, factors = [], [], []
        members: Iterable[Any] = c.parts if isinstance(c, CompositeComponent) else ()
        for part in members:
            if not isinstance(part, Component):
                continue
            part_rate = _option(part, "learning-rate", None)
            for name in _own_weights(part, params):
                names.append(name)
                rates.append(None if part_rate is None else _number(part, "learning-rate", 0.001))
                factors.append(factor * _number(part, "learning-rate-factor", 1.0))
        for name in _own_weights(c, params):
            names.append(name)
            rates.append(rate)
            factors.append(factor)
        if not names:
            continue
        constraint = _number(c, "orthonormal-constraint", 0.0)
        field = ORTHONORMAL_PARAM.get(c.kaldi_type)
        constrained = None
        if constraint != 0.0:
            if field is None:
                raise TrainingError(
                    f"component {c.name!r} ({c.kaldi_type}): orthonormal-constraint={constraint} cannot be applied: "
                    f"Kaldi's ConstrainOrthonormal constrains only {', '.join(ORTHONORMAL_PARAM)}"
                )
            weight = getattr(c, field)
            if not isinstance(weight, Weight) or weight.name not in params:
                raise TrainingError(
                    f"component {c.name!r} ({c.kaldi_type}): orthonormal-constraint={constraint} needs its "
                    f"{field} to be a trained parameter"
                )
            constrained = weight.name
        for name in names:
            if name in owner:
                raise TrainingError(
                    f"parameter {name!r} belongs to components {owner[name]!r} and {c.name!r}: Kaldi's rules "
                    "need each parameter in one component"
                )
            owner[name] = c.name
        rules[c.name] = ComponentRule(
            c.name,
            c.kaldi_type,
            tuple(names),
            tuple(rates),
            tuple(factors),
            rate=rate,
            factor=factor,
            max_change=_number(c, "max-change", 0.0),
            l2_regularize=_number(c, "l2-regularize", 0.0),
            orthonormal_constraint=constraint,
            orthonormal_param=constrained,
        )
    out = list(rules.values())
    for name in params:
        if name not in owner:
            out.append(ComponentRule(name, "", (name,), (None,), (1.0,)))
    return tuple(out)


def carries_kaldi_rules(network: Any) -> bool:
    """Whether some component of `network` has an option that changes how Kaldi trains it (max-change,
    l2-regularize, a learning-rate-factor other than 1, orthonormal-constraint): `fit` then applies
    Kaldi's rules unless told not to."""
    return any(rule.shapes_the_update for rule in component_rules(network))


def _unhonoured(network: Any, natural: set[str], repaired: set[str]) -> dict[str, list[str]]:
    """Kaldi training options of `network`'s components that the rules do not apply: option -> components."""
    out: dict[str, list[str]] = {}
    seen: set[str] = set()
    for c in walk(network_roots(network)):
        if not isinstance(c, Component) or c.name in seen:
            continue
        seen.add(c.name)
        scale = c.option("self-repair-scale", 0.0)
        if isinstance(scale, (int, float)) and scale > 0.0 and c.name not in repaired:
            out.setdefault("self-repair-scale", []).append(c.name)
        config = c.option("self-repair-config", ())
        if isinstance(config, tuple) and any(v > 0.0 for v in config[5:]):  # the LSTM's five scales
            out.setdefault("self-repair-config", []).append(c.name)
        # Kaldi's LinearComponent preconditions its gradient whatever its use-natural-gradient says.
        kaldi_ng = (
            c.kaldi_type.startswith("NaturalGradient")
            or c.kaldi_type == "LinearComponent"
            or c.option("use-natural-gradient", False) is True
        )
        if kaldi_ng and c.name not in natural and _own_weights(c, network.params):
            out.setdefault(NATURAL_GRADIENT, []).append(c.name)
        if c.option("is-gradient", False) is True:
            out.setdefault("is-gradient=true", []).append(c.name)
    return out


NATURAL_GRADIENT = "natural gradient"


def warn_unhonoured(network: Any, natural: set[str], repaired: set[str]) -> None:
    """A `KaldiRulesWarning` naming each training option of `network`'s components that the rules do not apply
    (`natural`: the components natural gradient preconditions; `repaired`: those fit's step self-repairs)."""
    found = _unhonoured(network, natural, repaired)
    if not found:
        return
    lines = []
    for option, names in found.items():
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        lines.append(f"{option} ({shown})")
    warnings.warn(
        f"Kaldi's training rules: not applied here: {'; '.join(lines)}. Why, and what to use instead: "
        'docs/training.md, "Kaldi\'s training rules"',
        KaldiRulesWarning,
        stacklevel=3,
    )
