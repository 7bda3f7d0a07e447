"""What the commands' parsers share: argument types, Kaldi's boolean options, help texts, the usage error."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from ...core.index import INDEX_LIMIT

__all__ = [
    "ALLOW_PIPES_HELP",
    "COMPILE_CACHE_HELP",
    "FORCE_HELP",
    "FRAMES",
    "KALDI_FLAGS",
    "UsageError",
    "count",
    "fraction",
    "kaldi_bool",
    "kaldi_flags",
    "non_negative_float",
    "positive_float",
    "widths",
]

#: The frames an Index can name: more context (or a longer chunk) than that cannot be planned.
FRAMES = INDEX_LIMIT - 1

#: Kaldi's boolean options of every command, which may be given bare (`--apply-exp` for `--apply-exp=true`).
KALDI_FLAGS = ("--binary", "--raw", "--apply-exp", "--use-priors", "--remove-offset")

ALLOW_PIPES_HELP = (
    "run the shell commands that scp entries name (`utt cmd |`), as Kaldi does; without it such "
    "an entry is an error (a command typed in the rspecifier itself, `ark:cmd |`, always runs)"
)

COMPILE_CACHE_HELP = (
    "keep compiled programs in DIR for later runs (default: $SYMNET_COMPILE_CACHE, else "
    "$XDG_CACHE_HOME/symnet/xla; see symnet.engine.enable_compile_cache); off: compile every run"
)

FORCE_HELP = (
    "write an output even where it is one of the input files (refused by default: it would replace the input; "
    "two outputs that are one file are always refused)"
)


class UsageError(Exception):
    """A combination of options a command does not take: usage and this message, exit status 2."""


def count(least: int, most: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer >= `least` (and <= `most`)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < least or (most is not None and value > most):
            bound = f"in [{least}, {most}]" if most is not None else f">= {least}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    return parse


def widths(text: str) -> int | tuple[int, ...]:
    """An argparse type: one count >= 1, or several separated by commas (Kaldi's `--frames-per-eg=150,110,100`)."""
    parse = count(1)
    values = tuple(parse(part.strip()) for part in text.split(","))
    return values[0] if len(values) == 1 else values


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """An argparse type: 0, or a finite number > 0."""
    if text.strip() in ("0", "0.0"):
        return 0.0
    return positive_float(text)


def fraction(text: str) -> float:
    """An argparse type: a number between 0 and 1, both excluded."""
    value = positive_float(text)
    if not value < 1:
        raise argparse.ArgumentTypeError(f"must be a fraction between 0 and 1, got {text}")
    return value


def kaldi_bool(text: str) -> bool:
    """An argparse type: Kaldi's booleans (true/false, t/f, 1/0, yes/no)."""
    value = text.strip().lower()
    if value in ("true", "t", "1", "yes"):
        return True
    if value in ("false", "f", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def kaldi_flags(argv: Sequence[str]) -> list[str]:
    """Kaldi's bare boolean flags (`--apply-exp`) as `--apply-exp=true`, so they never take the next word."""
    return [f"{arg}=true" if arg in KALDI_FLAGS else arg for arg in argv]
