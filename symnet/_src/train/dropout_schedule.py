"""Kaldi's `--trainer.dropout-schedule` (steps/libs/nnet3/train/dropout_schedule.py): the dropout proportion
of each dropout component as a piecewise linear function of the fraction of the training data processed."""

from __future__ import annotations

import re
from collections.abc import Iterable

import attrs

from ..base.errors import TrainingError
from ..components.misc import DropoutComponent, DropoutMaskComponent, GeneralDropoutComponent

__all__ = ["DROPOUT_TYPES", "DropoutSchedule"]

#: The components a dropout schedule sets (SetDropoutProportion, nnet-utils.cc).
DROPOUT_TYPES = (DropoutComponent, DropoutMaskComponent, GeneralDropoutComponent)


@attrs.frozen
class DropoutSchedule:
    """Kaldi's `--trainer.dropout-schedule`: `'0,0@0.20,0.5@0.50,0'` is a piecewise linear function of the
    fraction of the training data processed (0 at the start, 1 at the end): its first value at 0, its last
    at 1, `p@f` at f and a bare `p` between them at 0.5; `'pattern=function ...'` gives each pattern of
    component names (`*` matches any run of characters) its own function, later patterns overriding
    earlier ones. It sets DropoutComponent, DropoutMaskComponent and GeneralDropoutComponent.
    """

    text: str
    parts: tuple[tuple[str, tuple[tuple[float, float], ...]], ...]

    @classmethod
    def parse(cls, text: str) -> DropoutSchedule:
        """The schedule of a `--trainer.dropout-schedule` string (TrainingError naming what is wrong)."""
        if not isinstance(text, str) or not text.strip():
            raise TrainingError(f"dropout schedule: expected a string like '0,0.5@0.5,0', got {text!r}")
        parts = []
        for item in text.split():
            pattern, eq, function = item.rpartition("=")
            if eq and not pattern:
                raise TrainingError(f"dropout schedule {text!r}: {item!r} has no component-name pattern before '='")
            parts.append((pattern if eq else "*", _parse_function(text, function)))
        return cls(text, tuple(parts))

    def proportions(self, fraction: float) -> list[tuple[str, float]]:
        """(pattern, proportion) after `fraction` of the data (above 1 counts as 1)."""
        fraction = min(float(fraction), 1.0)
        return [(pattern, _interpolate(points, fraction)) for pattern, points in self.parts]

    def for_components(self, names: Iterable[str], fraction: float) -> dict[str, float]:
        """Component name -> proportion for the dropout components `names`, the later patterns winning."""
        out: dict[str, float] = {}
        for pattern, value in self.proportions(fraction):
            for name in names:
                if _matches(name, pattern):
                    out[name] = value
        return out

    def check(self, names: Iterable[str]) -> None:
        """TrainingError for a pattern that names no dropout component of the network."""
        names = list(names)
        for pattern, _ in self.parts:
            if not any(_matches(n, pattern) for n in names):
                have = ", ".join(names) if names else "none"
                raise TrainingError(
                    f"dropout schedule {self.text!r}: pattern {pattern!r} matches no dropout component "
                    f"(DropoutComponent, DropoutMaskComponent, GeneralDropoutComponent) of the network; it has {have}"
                )


def _parse_function(text: str, function: str) -> tuple[tuple[float, float], ...]:
    items = function.split(",")
    if len(items) < 2:
        raise TrainingError(f"dropout schedule {text!r}: {function!r} needs at least a start and an end value")

    def number(value: str, what: str) -> float:
        try:
            out = float(value)
        except ValueError:
            raise TrainingError(f"dropout schedule {text!r}: {what} {value!r} is not a number") from None
        if not 0.0 <= out <= 1.0:
            raise TrainingError(f"dropout schedule {text!r}: {what} {value!r} is not in [0, 1]")
        return out

    points = [(0.0, number(items[0], "proportion"))]
    for item in items[1:-1]:
        value, at, where = item.partition("@")
        fraction = number(where, "data fraction") if at else 0.5
        if fraction < points[-1][0]:
            raise TrainingError(
                f"dropout schedule {text!r}: data fraction {fraction} of {item!r} comes before {points[-1][0]}: "
                "the fractions must not decrease"
            )
        points.append((fraction, number(value, "proportion")))
    points.append((1.0, number(items[-1], "proportion")))
    return tuple(points)


def _interpolate(points: tuple[tuple[float, float], ...], fraction: float) -> float:
    """The schedule's value at `fraction`, as `_get_component_dropout` picks and interpolates."""
    if fraction == 0.0:
        return points[0][1]
    # The last breakpoint at or before `fraction`, and the one after it.
    index = max(i for i, (f, _) in enumerate(points) if f <= fraction)
    if index == len(points) - 1:
        return points[-1][1]
    (f0, p0), (f1, p1) = points[index], points[index + 1]
    if f1 == f0:
        return p0
    return (fraction - f0) * (p1 - p0) / (f1 - f0) + p0


def _matches(name: str, pattern: str) -> bool:
    """Kaldi's NameMatchesPattern: `*` matches any run of characters, everything else itself."""
    regex = ".*".join(re.escape(piece) for piece in pattern.split("*"))
    return re.fullmatch(regex, name, flags=re.DOTALL) is not None
