"""The implementation behind `symnet.errors` (private: import its names from `symnet.errors`, whose docstring
says what they are)."""

from __future__ import annotations

from .text import QUOTE_LIMIT

__all__ = [
    "ArgumentTypeError",
    "at",
    "ChainError",
    "CheckpointError",
    "ComponentConfigError",
    "ComponentModeError",
    "ConfigError",
    "ConfigWriteError",
    "DescriptorError",
    "GraphError",
    "KaldiDataError",
    "LayerOptionError",
    "LayerTypeError",
    "ModelFormatError",
    "ModelKeyError",
    "ModelWriteError",
    "OutputError",
    "ParameterError",
    "PlanError",
    "SaveError",
    "ShapeError",
    "StreamError",
    "SymnetError",
    "TrainingError",
    "UnknownOptionError",
    "UnknownShapeError",
]


class SymnetError(Exception):
    """Base class of all symnet errors."""


class LayerTypeError(SymnetError, TypeError):
    """An operand that is not a layer, number or array."""


class ShapeError(SymnetError, ValueError):
    """Shapes that do not fit together (broadcasting, matrix products, deltas)."""


class ParameterError(SymnetError, ValueError):
    """Parameters missing, of the wrong shape, or two Weights claiming one name."""


class GraphError(SymnetError, ValueError):
    """A network graph that cannot be built: unknown references, bad cycles."""


class LayerOptionError(SymnetError, ValueError):
    """A typed layer (`BatchNorm`, `Conv2d`, ...) built with an option of the wrong kind or out of range;
    names the layer, the option and the line."""


class UnknownOptionError(LayerOptionError, TypeError):
    """A layer built with a keyword argument it does not take (a misspelled option); names the layer, the
    nearest option it does take and the line. A TypeError as well, as Python's own for a bad keyword."""


class DescriptorError(SymnetError, ValueError):
    """A descriptor built with arguments Kaldi does not allow."""


class StreamError(SymnetError, RuntimeError):
    """A `Stream` used out of order: frames fed or `finish()` called after the utterance was finished, or
    `finish()` before any frame."""


class PlanError(SymnetError, ValueError):
    """A computation request that cannot be planned (uncomputable outputs, bad inputs)."""


def _window(text: str, at: int) -> tuple[str, int]:
    """`text` cut to about QUOTE_LIMIT characters around position `at`, and `at` in the cut text."""
    if len(text) <= QUOTE_LIMIT:
        return text, at
    start = min(max(at - QUOTE_LIMIT // 2, 0), len(text) - QUOTE_LIMIT)
    head, tail = ("…" if start else ""), ("…" if start + QUOTE_LIMIT < len(text) else "")
    return head + text[start : start + QUOTE_LIMIT] + tail, at - start + len(head)


def at(where: str | None) -> str:
    """Format a source location for an error message."""
    return f" (built at {where})" if where else ""


class ConfigError(SymnetError, ValueError):
    """A malformed Kaldi config line: carries file, line, column and the line text.

    `str(error)` shows `file:line:column: message`, the line, and a caret under
    the column at fault.
    """

    def __init__(self, message: str, *, file: str = "<config>", line: int = 0, column: int = 0, text: str = ""):
        if len(message) > 4 * QUOTE_LIMIT:  # a descriptor or name of a 400 KB line quoted in it: its start and end
            message = f"{message[: 2 * QUOTE_LIMIT]}… ({len(message)} characters) …{message[-QUOTE_LIMIT:]}"
        self.message = message
        self.file = file
        self.line = line
        self.column = column
        self.text = text
        shown, at = _window(text, max(column - 1, 0))
        caret = f"\n    {shown}\n    {' ' * at}^" if text else ""
        # a line built in Python (line 0) has no place in a file to show
        where = f"{file}:{line}:{column}: " if line else (f"{file}: " if file != "<config>" else "")
        super().__init__(f"{where}{message}{caret}")


class OutputError(SymnetError, OSError):
    """An output path that cannot be written (a folder, no permission, a full disk); names the user's path."""

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror}"


class ModelFormatError(SymnetError, ValueError):
    """A model file that is truncated, corrupted or inconsistent; names the token or byte offset."""

    # set by the Kaldi model readers (symnet._src.kaldi_io.binary.model_error): where in which file, and what was
    # expected
    file: str
    offset: int | None
    line: int | None
    column: int | None
    expected: str | None


class ArgumentTypeError(SymnetError, TypeError):
    """A public function given an argument of a type it does not take; names the function and the type."""


class UnknownShapeError(SymnetError, TypeError):
    """A component's parameter operand whose shape is not known before running (not a Weight or Literal)."""


class ComponentConfigError(SymnetError, ValueError):
    """A component's config options are missing, unknown or out of range.

    `component` is the component's name, `type` its Kaldi type and `option`
    the option at fault (None when the fault is not one option's).
    """

    def __init__(self, message: str, *, component: str = "", type: str = "", option: str | None = None):
        self.message = message
        self.component = component
        self.type = type
        self.option = option
        where = f"component {component!r} ({type})" if component else type
        super().__init__(f"{where}: {message}" if where else message)


class ComponentModeError(SymnetError, RuntimeError):
    """A component run in a mode symnet does not support yet (e.g. dropout in training mode)."""


class ConfigWriteError(SymnetError, ValueError):
    """A Network that cannot be written as a Kaldi config (a node that is not a component or a
    dim range, a component whose options cannot be recovered, an expression Kaldi's descriptors cannot say)."""


class ModelWriteError(SymnetError, ValueError):
    """A network that cannot be written as a Kaldi model file (a component type symnet cannot write,
    a node that is not a component or a dim range, priors without a transition model, a value
    Kaldi's writers cannot hold)."""


class ModelKeyError(SymnetError, KeyError):
    """A token or component that a model file's content does not have."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class SaveError(SymnetError, ValueError):
    """A network `symnet.save` cannot write: a class that is not registered, a field value the format does not
    hold; names the layer and the field."""


class TrainingError(SymnetError, RuntimeError):
    """Training cannot go on: a diverging loss, data the network cannot take."""


class KaldiDataError(SymnetError, ValueError):
    """Kaldi archives that cannot be used: unreadable specifiers, missing utterances, length mismatches."""


class CheckpointError(SymnetError, ValueError):
    """A checkpoint that cannot be used: wrong format, other network or run, damaged file, in use."""


class ChainError(SymnetError, ValueError):
    """A chain (LF-MMI) graph, FST file or objective option that symnet cannot use; names the value at fault."""
