"""The two tasks' vocabularies and word-sequence grammars: connected digits in the spirit of TIDIGITS and
short spoken commands to a house."""

from __future__ import annotations

import numpy as np

from .errors import CorpusError

__all__ = ["TASKS", "draw_words", "vocabulary"]

DIGITS = ("oh", "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")

ROOMS = ("kitchen", "bedroom", "bathroom", "hall", "garden")
DEVICES = ("light", "lights", "fan", "heater", "radio")
OPENINGS = ("door", "window")
COUNTS = ("two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "fifteen", "twenty", "thirty")
DEGREES = ("fifteen", "twenty", "thirty")

#: The command grammar: each template's slots are a tuple of choices, fixed words a string.
COMMANDS: tuple[tuple[str | tuple[str, ...], ...], ...] = (
    (("turn", "switch"), ("on", "off"), "the", ROOMS, DEVICES),
    (("open", "close"), "the", ROOMS, OPENINGS),
    ("set", "a", "timer", "for", COUNTS, ("minutes", "seconds")),
    ("set", "the", "temperature", "to", DEGREES, "degrees"),
    (("play", "stop"), "the", "music"),
    ("cancel", "the", "timer"),
    ("what", "time", "is", "it"),
)

TASKS = ("digits", "commands")


def vocabulary(task: str) -> tuple[str, ...]:
    """Every word `task` can say, sorted."""
    if task == "digits":
        return tuple(sorted(DIGITS))
    if task == "commands":
        words = {w for template in COMMANDS for slot in template for w in ((slot,) if isinstance(slot, str) else slot)}
        return tuple(sorted(words))
    raise CorpusError(f"unknown task {task!r}: the tasks are {', '.join(TASKS)}")


def draw_words(task: str, rng: np.random.Generator, digits: tuple[int, int]) -> list[str]:
    """One utterance's words: a digit string of `digits[0]` to `digits[1]` digits, each of the 11 equally
    likely, or a command from a template drawn uniformly with each slot's choice drawn uniformly."""
    if task == "digits":
        return [DIGITS[k] for k in rng.integers(0, len(DIGITS), size=int(rng.integers(digits[0], digits[1] + 1)))]
    if task == "commands":
        template = COMMANDS[int(rng.integers(0, len(COMMANDS)))]
        return [slot if isinstance(slot, str) else slot[int(rng.integers(0, len(slot)))] for slot in template]
    raise CorpusError(f"unknown task {task!r}: the tasks are {', '.join(TASKS)}")
