"""Kaldi nnet3 model files at the token level: raw nnets and acoustic models, text and binary.

`read_nnet(path)` / `parse_nnet(data)` give an `NnetFile`; `write_nnet(path, nnet,
binary=...)` / `format_nnet(nnet, binary=...)` write one back as Kaldi does. Nothing
here builds networks: an `NnetFile` is the file's content, immutable and compared
by value (not by format).

The layout (kaldi-asr/kaldi src/nnet3/nnet-nnet.cc Nnet::Read/Write,
am-nnet-simple.cc, hmm/transition-model.cc, hmm/hmm-topology.cc):

    [\\0B]                                    binary files only
    [<TransitionModel> ... </TransitionModel>] acoustic models (nnet3-am-init, final.mdl)
    <Nnet3> \\n
    input-node name=input dim=40\\n          the config lines, as text in both formats
    component-node name=... \\n              (Kaldi writes no `component` lines here)
    \\n                                      a blank line ends them
    <NumComponents> N
    <ComponentName> name <TypeComponent> <Token> value ... </TypeComponent>   (N times)
    </Nnet3>
    [<LeftContext> l <RightContext> r <Priors> vector]   acoustic models

`NnetFile.config` is that config text; `NnetFile.components` holds an
`NnetComponent` per component: its name, its Kaldi type and its fields, the
(token, value) pairs in the order Kaldi writes them, so that writing reproduces
the file. Tokens are kept without their angle brackets (``LinearParams``).
Values are

- ``int`` (int32), ``numpy.float32`` (Kaldi's BaseFloat), ``numpy.float64``
  (double), ``bool`` (T/F);
- a tuple of those for tokens followed by several values (``<RankInOut> 20 80``);
- ``str`` for a word value; ``None`` for a token with no value (``<Continuous>``);
- read-only numpy arrays: float32/float64 vectors (FV/DV) and matrices (FM/DM),
  int32 vectors (``[ 0 1 ]``, ``WriteIntegerVector``) and int32 (n, 2) arrays
  for integer-pair vectors (``[ -1,0 0,1 ]``);
- an `NnetComponent` (with name ``""``) for a nested block: the parts of a
  CompositeComponent, the ``<ConvolutionModel>`` of a TimeHeightConvolutionComponent.
  Its token is its type; it is written as ``<Type> ... </Type>``.

The grammar is generic: after ``<ComponentName> name <Type>``, (token, value)
pairs until ``</Type>``. In text the kind of a value shows (``[`` starts an
array, with a newline straight after for a matrix, commas for pairs, a single
space before it for integer vectors; T/F; numbers; a word; nothing before the
next token). Binary data does not say whether 4 bytes after the size byte 4 are
an int32 or a float, so each component type's record
(`symnet._src.kaldi.components.TOKEN_KINDS`) gives the kind of each token as
Kaldi's Read/Write functions have it (`symnet._src.kaldi.models.token_kinds`); text reading
uses it too, so that a text model converts to the right binary. A binary value
whose kind neither the table nor the data tells is a `ModelFormatError` naming
the token and byte offset.

Acoustic models keep the transition model's raw bytes: writing in the format it
was read in reproduces it byte for byte; writing in the other format converts
it from its parsed form (`symnet._src.kaldi.models.transition_model.TransitionModel`). `NnetFile.priors`,
`left_context` and `right_context` are AmNnetSimple's.

`read_kaldi_array(path)` reads a single Kaldi matrix or vector file (text or
binary), e.g. for a component's ``matrix=`` option.

Malformed, truncated or corrupted files raise `ModelFormatError` naming what was
expected and where (``file: byte N`` for binary, ``file:line:col`` for text).
Writing is atomic: the file is written to a temporary file beside the target
and moved over it, so a failure leaves any existing file untouched.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import numpy as np

from ...base.atomic import atomic_write
from ...base.errors import ArgumentTypeError, ModelFormatError, ModelKeyError
from ...kaldi_io.binary import BinaryReader, TextReader, make_reader, model_error, read_kaldi_array
from ...kaldi_io.numbers import INT32_MAX, INT32_MIN, NUMBER_RE, parse_real
from ...kaldi_io.writer import Writer
from ..components import TOKEN_KINDS
from .token_kinds import ARRAYS, BOOL, DMATRIX, DOUBLE, DVECTOR, FLAG, FLOAT, INT, INTS, MATRIX, PAIRS, VECTOR, Kind
from .token_values import ByValue, array_value, scalar_value, value_key
from .transition_model import TransitionModel, read_transition_model, write_transition_model

__all__ = [
    "NnetComponent",
    "NnetFile",
    "field_to_token",
    "find_token",
    "format_nnet",
    "parse_nnet",
    "read_kaldi_array",
    "read_nnet",
    "token_to_field",
    "write_nnet",
]

#: Nested blocks other than components (whose tokens all end in "Component").
_BLOCKS = frozenset({"ConvolutionModel"})
_MAX_DEPTH = 8


def _is_block(token: str) -> bool:
    return token.endswith("Component") or token in _BLOCKS


def _kind(kaldi_type: str, token: str) -> Kind | None:
    return TOKEN_KINDS.get(kaldi_type, {}).get(token)


def token_to_field(token: str) -> str:
    """Kaldi's token (without brackets) as symnet's parameter suffix: ``LinearParams`` -> ``linear_params``."""
    if "_" in token or token.islower():
        return token
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", token).lower()


def field_to_token(field: str) -> str:
    """The inverse of `token_to_field` for Kaldi's tokens: ``linear_params`` -> ``LinearParams``
    (``w_h`` stays ``w_h``)."""
    if field == "w_h":
        return field
    return "".join(part[:1].upper() + part[1:] for part in field.split("_"))


def find_token(component: NnetComponent, field: str) -> str | None:
    """The token of `component` that holds the symnet parameter `field` (``linear_params`` ->
    ``LinearParams``), or None."""
    return next((t for t in component.tokens if token_to_field(t) == field), None)


# ----- components ------------------------------------------------------------------------------


def _normalize(value: Any, kind: Kind | None, where: str) -> Any:
    if isinstance(value, NnetComponent):
        if kind is not None:
            raise ModelFormatError(f"{where}: expected a {kind} value, got a nested {value.type}")
        return value
    if isinstance(kind, tuple):
        if not isinstance(value, (tuple, list)) or len(value) != len(kind):
            raise ModelFormatError(f"{where}: expected {len(kind)} values ({', '.join(kind)}), got {value!r}")
        return tuple(scalar_value(v, k, where) for v, k in zip(value, kind))
    if kind in ARRAYS or isinstance(value, (np.ndarray, list)):
        return array_value(value, kind if kind in ARRAYS else None, where)
    if kind is None and isinstance(value, tuple):
        if not value or any(isinstance(v, (tuple, list, np.ndarray, str, NnetComponent)) or v is None for v in value):
            raise ModelFormatError(f"{where}: a tuple value must hold two or more numbers, got {value!r}")
        return tuple(scalar_value(v, None, where) for v in value)
    return scalar_value(value, kind, where)


def _fields(value: Any) -> tuple[tuple[str, Any], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    return tuple((k, v) for k, v in items)


@attrs.frozen(eq=False, repr=False)
class NnetComponent(ByValue):
    """One component as its file holds it: `name` (``""`` for a nested block), Kaldi `type`
    (``NaturalGradientAffineComponent``) and `fields`, the (token, value) pairs in file order.

    Values are normalised on construction with `TOKEN_KINDS` (Python floats become float32, or
    float64 for double tokens; lists become read-only arrays), so that an `NnetComponent` built in
    Python compares equal to the same component read back from a file.
    """

    name: str
    type: str
    fields: tuple[tuple[str, Any], ...] = attrs.field(default=(), converter=_fields)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or (self.name and any(c in " \t\n\v\f\r" for c in self.name)):
            raise ModelFormatError(f"component name {self.name!r} must be a string without whitespace")
        if not isinstance(self.type, str) or not re.fullmatch(r"[^\s<>/]+", self.type):
            raise ModelFormatError(f"component type {self.type!r} must be a word without <, > or /")
        label = f"component {self.name!r} ({self.type})" if self.name else self.type
        fields = []
        for item in self.fields:
            if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
                raise ModelFormatError(f"{label}: fields must be (token, value) pairs, got {item!r}")
            token, value = item
            if not re.fullmatch(r"[^\s<>/]+", token):
                raise ModelFormatError(
                    f"{label}: token {token!r} must be a word without <, > or / (give LinearParams for <LinearParams>)"
                )
            if isinstance(value, NnetComponent):
                if value.type != token or value.name:
                    raise ModelFormatError(
                        f"{label}: a nested block's token must be its type and its name "
                        f"empty, got token {token!r} for {value.type!r} named {value.name!r}"
                    )
            elif _is_block(token):
                raise ModelFormatError(
                    f"{label}: token <{token}> names a nested block; its value must be an NnetComponent"
                )
            fields.append((token, _normalize(value, _kind(self.type, token), f"{label} <{token}>")))
        object.__setattr__(self, "fields", tuple(fields))

    def key(self) -> Any:
        return ("component", self.name, self.type, tuple((t, value_key(v)) for t, v in self.fields))

    def __repr__(self) -> str:
        def short(value: Any) -> str:
            if isinstance(value, np.ndarray):
                return f"{value.dtype}[{'x'.join(map(str, value.shape))}]"
            return repr(value)

        fields = ", ".join(f"{t}={short(v)}" for t, v in self.fields)
        return f"NnetComponent({self.name!r}, {self.type!r}, {fields})"

    @property
    def tokens(self) -> tuple[str, ...]:
        return tuple(t for t, _ in self.fields)

    def __contains__(self, token: str) -> bool:
        return any(t == token for t, _ in self.fields)

    def __getitem__(self, token: str) -> Any:
        for t, v in self.fields:
            if t == token:
                return v
        raise ModelKeyError(f"{self.type} {self.name!r} has no <{token}>")

    def get(self, token: str, default: Any = None) -> Any:
        """The value of the first field `token`, or `default`."""
        return next((v for t, v in self.fields if t == token), default)

    def replace(self, **values: Any) -> NnetComponent:
        """A copy with the values of existing tokens replaced (``replace(LinearParams=w)``)."""
        missing = [t for t in values if t not in self]
        if missing:
            raise ModelKeyError(f"{self.type} {self.name!r} has no <{missing[0]}>")
        return attrs.evolve(self, fields=tuple((t, values.get(t, v)) for t, v in self.fields))

    @property
    def parameters(self) -> dict[str, np.ndarray]:
        """Float arrays by symnet field name (``linear_params``), for the network builder."""
        return {token_to_field(t): v for t, v in self.fields if isinstance(v, np.ndarray) and v.dtype.kind == "f"}


# ----- the file ---------------------------------------------------------------------------------


def _config_text(value: Any) -> str:
    if isinstance(value, str):
        text = value
    else:
        text = "".join(line + "\n" for line in value)
    if text and not text.endswith("\n"):
        text += "\n"
    return text


def _components(value: Iterable[NnetComponent]) -> tuple[NnetComponent, ...]:
    return tuple(value)


def _priors(value: Any) -> np.ndarray | None:
    return None if value is None else array_value(value, VECTOR, "<Priors>")


@attrs.frozen(eq=False)
class NnetFile(ByValue):
    """A Kaldi nnet3 model file's content: a raw nnet, or an acoustic model (AmNnetSimple).

    `config` is the config text Kaldi writes between ``<Nnet3>`` and ``<NumComponents>`` (one
    line per node, each ending in a newline); `components` the components in file order. For an
    acoustic model, `transition_model`, `left_context`, `right_context` and `priors` are set
    (all or none). Equality is by value and ignores the format the file was read from.
    """

    config: str = attrs.field(converter=_config_text)
    components: tuple[NnetComponent, ...] = attrs.field(converter=_components)
    transition_model: TransitionModel | None = None
    left_context: int | None = None
    right_context: int | None = None
    priors: np.ndarray | None = attrs.field(default=None, converter=_priors)

    def __attrs_post_init__(self) -> None:
        for number, line in enumerate(self.config.split("\n")[:-1], 1):
            if line.strip("\r") == "":
                raise ModelFormatError(f"config line {number} is empty: a blank line ends the config section")
            if "\r" in line:
                raise ModelFormatError(f"config line {number} contains a carriage return")
        seen: set[str] = set()
        for component in self.components:
            if not isinstance(component, NnetComponent):
                raise ModelFormatError(f"components must be NnetComponents, got {component!r}")
            if not component.name:
                raise ModelFormatError(f"a top-level {component.type} needs a name")
            if component.name in seen:
                raise ModelFormatError(f"component name {component.name!r} appears twice")
            seen.add(component.name)
        am = (self.transition_model, self.left_context, self.right_context, self.priors)
        if any(v is not None for v in am) and any(v is None for v in am):
            raise ModelFormatError(
                "an acoustic model needs transition_model, left_context, right_context and "
                "priors (all of them, or none for a raw nnet)"
            )
        for name in ("left_context", "right_context"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, scalar_value(value, INT, name))

    def key(self) -> Any:
        return (
            "nnet",
            self.config,
            tuple(c.key() for c in self.components),
            value_key(self.transition_model),
            self.left_context,
            self.right_context,
            None if self.priors is None else value_key(self.priors),
        )

    @property
    def is_am(self) -> bool:
        """Whether this is an acoustic model (transition model, nnet, priors)."""
        return self.transition_model is not None

    @property
    def config_lines(self) -> tuple[str, ...]:
        return tuple(self.config.split("\n")[:-1])

    def component(self, name: str) -> NnetComponent:
        for c in self.components:
            if c.name == name:
                return c
        raise ModelKeyError(f"no component named {name!r}")

    def replace_components(self, components: Iterable[NnetComponent]) -> NnetFile:
        """A copy with the components of the same names replaced."""
        new = {c.name: c for c in components}
        missing = [name for name in new if name not in {c.name for c in self.components}]
        if missing:
            raise ModelKeyError(f"no component named {missing[0]!r}")
        return attrs.evolve(self, components=tuple(new.get(c.name, c) for c in self.components))


# ----- reading ---------------------------------------------------------------------------------


def _read_value(r: BinaryReader | TextReader, kind: Kind | None, token: str, label: str) -> Any:
    what = f"{token} of {label}"
    if kind is None:
        return _infer_binary(r, token, label) if r.binary else _infer_text(r, token, label)  # type: ignore[arg-type]
    if isinstance(kind, tuple):
        return tuple(_read_value(r, k, token, label) for k in kind)
    if kind == INT:
        return r.read_int(what)
    if kind in (FLOAT, DOUBLE):
        return r.read_real(what) if r.binary else r.read_real(what, double=kind == DOUBLE)  # type: ignore[call-arg]
    if kind == BOOL:
        return r.read_bool(what)
    if kind in (VECTOR, DVECTOR):
        return r.read_vector(what) if r.binary else r.read_vector(what, double=kind == DVECTOR)  # type: ignore
    if kind in (MATRIX, DMATRIX):
        return r.read_matrix(what) if r.binary else r.read_matrix(what, double=kind == DMATRIX)  # type: ignore
    if kind in (INTS, PAIRS):
        return r.read_int_vector(what, pairs=kind == PAIRS)
    if kind == FLAG:
        return None
    raise AssertionError(kind)


def _infer_binary(r: BinaryReader, token: str, label: str) -> Any:
    byte = r.peek()
    array = r.peek_array_token()
    if array in ("FV", "DV"):
        return r.read_vector(f"{token} of {label}")
    if array:
        return r.read_matrix(f"{token} of {label}")
    if byte == ord("<"):
        return None
    if byte in (ord("T"), ord("F")):
        return r.read_bool(f"{token} of {label}")
    if byte == 8:
        return r.read_real(f"{token} of {label}")
    if byte == 4:
        raise r.error(
            f"cannot tell whether the value of {token} in {label} is an int32, a float or an integer "
            f"vector: {token} is not in symnet's table of Kaldi tokens (TOKEN_KINDS) for this type",
            expected=f"a known token of {label}",
        )
    raise r.error(f"expected the value of {token} in {label}, got {r.describe(byte)}", expected=f"value of {token}")


def _infer_text(r: TextReader, token: str, label: str) -> Any:
    what = f"{token} of {label}"
    single_space = r.peek() == "["  # Kaldi writes "<Tok> [ 1 2 ]" for integer vectors, "<Tok>  [" for reals
    r.skip_ws()
    c = r.peek()
    if c == "<" or c == "":
        return None
    if c == "[":
        end = r.text.find("]", r.pos)
        content = r.text[r.pos + 1 : end] if end >= 0 else ""
        if "," in content:
            return r.read_int_vector(what, pairs=True)
        words = content.split()
        if single_space and all(re.fullmatch(r"[+-]?[0-9]+", w) for w in words):
            return r.read_int_vector(what)
        if content.lstrip(" \t")[:1] in ("\n", "\r"):
            return r.read_matrix(what)
        return r.read_vector(what)
    values: list[Any] = []
    while True:
        save = r.pos
        word, at = r.word()
        if word and re.fullmatch(r"[+-]?[0-9]+", word) and INT32_MIN <= int(word) <= INT32_MAX:
            values.append(int(word))
        elif word and not word.startswith("<") and _is_number(word):
            values.append(parse_real(word, False))
        else:
            r.pos = save
            break
    if len(values) == 1:
        return values[0]
    if values:
        return tuple(values)
    word, at = r.read_word(f"the value of {what}")
    if word in ("T", "F"):
        return word == "T"
    return word


def _is_number(word: str) -> bool:
    return bool(NUMBER_RE.match(word))


def _read_block(r: BinaryReader | TextReader, name: str, kaldi_type: str, depth: int = 0) -> NnetComponent:
    label = f"component {name!r} ({kaldi_type})" if name else f"nested {kaldi_type}"
    if depth > _MAX_DEPTH:
        raise r.error(f"{label}: blocks nested more than {_MAX_DEPTH} deep", expected=f"</{kaldi_type}>")
    end = f"</{kaldi_type}>"
    fields: list[tuple[str, Any]] = []
    while True:
        at = r.skip_ws()
        token = r.read_token(f"a field token or {end}", f" in {label}")
        if token == end:
            break
        if not (len(token) > 2 and token[0] == "<" and token[-1] == ">" and token[1] != "/"):
            raise r.error(
                f"expected a field token like <LinearParams> or {end} in {label}, got {token!r}", at=at, expected=end
            )
        field = token[1:-1]
        if _is_block(field):
            value: Any = _read_block(r, "", field, depth + 1)
        else:
            value = _read_value(r, _kind(kaldi_type, field), token, label)
        fields.append((field, value))
    try:
        return NnetComponent(name, kaldi_type, tuple(fields))
    except ModelFormatError as e:
        raise r.error(str(e), at=at) from None


def _read_nnet3(r: BinaryReader | TextReader) -> tuple[str, list[NnetComponent]]:
    r.expect_token("<Nnet3>")
    at = r.pos
    rest = r.read_line("a newline after <Nnet3>")
    if rest not in ("", "\r"):
        raise r.error(f"expected a newline after <Nnet3>, got {rest[:40]!r}", at=at, expected="newline")
    lines = []
    while True:
        at = r.pos
        line = r.read_line("a config line, or the blank line that ends the config lines")
        if line in ("", "\r"):
            break
        if line.lstrip(" \t").startswith("<NumComponents>"):
            raise r.error(
                "expected the blank line that ends the config lines before <NumComponents>",
                at=at,
                expected="a blank line",
            )
        lines.append(line[:-1] if line.endswith("\r") else line)
    r.expect_token("<NumComponents>", " (after the blank line that ends the config lines)")
    at = r.pos
    count = r.read_int("<NumComponents>")
    if not 0 <= count < 100000:
        raise r.error(f"bad number of components {count}", at=at, expected="<NumComponents> in [0, 100000)")
    components: list[NnetComponent] = []
    names: set[str] = set()
    for c in range(count):
        r.expect_token("<ComponentName>", f" (component {c + 1} of {count})")
        at = r.skip_ws()
        name = r.read_token("a component name")
        if name in names:
            raise r.error(f"component name {name!r} appears twice", at=at, expected="a new component name")
        names.add(name)
        at = r.skip_ws()
        token = r.read_token(f"the type of component {name!r}, e.g. <AffineComponent>")
        if not (len(token) > 2 and token[0] == "<" and token[-1] == ">" and token[1] != "/"):
            raise r.error(
                f"expected the type of component {name!r} (like <AffineComponent>), got {token!r}",
                at=at,
                expected="<...Component>",
            )
        components.append(_read_block(r, name, token[1:-1]))
    r.expect_token("</Nnet3>", f" (after {count} components)")
    return "".join(line + "\n" for line in lines), components


def parse_nnet(data: bytes, *, file: str = "<bytes>") -> NnetFile:
    """The content of a Kaldi nnet3 model file given as bytes (text or binary, raw nnet or acoustic model)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ArgumentTypeError(f"parse_nnet takes bytes, got {type(data).__name__}")
    data = bytes(data)
    r = make_reader(data, file)
    first = r.peek_token()
    transition_model = None
    if first == "<TransitionModel>":
        transition_model = read_transition_model(r)
    elif first != "<Nnet3>":
        at = r.skip_ws()
        raise r.error(
            f"expected <Nnet3> (a raw nnet) or <TransitionModel> (an acoustic model), got {first[:40]!r}"
            if first
            else "empty file: expected <Nnet3> or <TransitionModel>",
            at=at,
            expected="<Nnet3>",
        )
    config, components = _read_nnet3(r)
    extra: dict[str, Any] = {}
    if transition_model is not None:
        r.expect_token("<LeftContext>", " (the acoustic model's, after </Nnet3>)")
        left = r.read_int("<LeftContext>")
        r.expect_token("<RightContext>")
        right = r.read_int("<RightContext>")
        r.expect_token("<Priors>")
        priors = r.read_vector("<Priors>")
        extra = dict(transition_model=transition_model, left_context=left, right_context=right, priors=priors)
    at = r.skip_ws()
    if not r.at_end():
        what = "the end of the acoustic model" if transition_model else "</Nnet3>"
        raise r.error(f"unexpected data after {what}: expected the end of the file", at=at, expected="end of file")
    try:
        return NnetFile(config, components, **extra)
    except ModelFormatError as e:
        raise model_error(
            str(e),
            file=file,
            offset=0 if r.binary else None,
            line=None if r.binary else 1,
            column=None if r.binary else 1,
        ) from None


def read_nnet(path: str | os.PathLike[str]) -> NnetFile:
    """Read a Kaldi nnet3 model file: ``nnet3-copy``/``nnet3-init`` output (raw nnet) or an acoustic
    model (``nnet3-am-init``, ``final.mdl``), text or binary."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        data = f.read()
    return parse_nnet(data, file=path)


# ----- writing ---------------------------------------------------------------------------------


def _write_value(w: Writer, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, tuple):
        for v in value:
            _write_value(w, v)
    elif isinstance(value, (bool, np.bool_)):
        w.bool(bool(value))
    elif isinstance(value, (int, np.integer)):
        w.int(int(value))
    elif isinstance(value, np.floating):
        w.real(value, double=value.dtype == np.float64)
    elif isinstance(value, str):
        w.token(value)
    elif isinstance(value, np.ndarray):
        if value.dtype.kind in "iu":
            w.int_vector(value, pairs=value.ndim == 2)
        elif value.ndim == 1:
            w.vector(value)
        else:
            w.matrix(value)
    else:
        raise ModelFormatError(f"cannot write value {value!r}")


def _write_block(w: Writer, component: NnetComponent) -> None:
    w.token(f"<{component.type}>")
    for token, value in component.fields:
        if isinstance(value, NnetComponent):
            _write_block(w, value)
            continue
        w.token(f"<{token}>")
        _write_value(w, value)
    w.token(f"</{component.type}>")


def format_nnet(nnet: NnetFile, *, binary: bool = True) -> bytes:
    """The bytes of `nnet` as Kaldi writes them (``nnet3-copy --binary=...``, or ``nnet3-am-copy``)."""
    if not isinstance(nnet, NnetFile):
        raise ArgumentTypeError(f"format_nnet takes an NnetFile, got {type(nnet).__name__}")
    w = Writer(binary)
    if binary:
        w.raw(b"\0B")
    if nnet.transition_model is not None:
        write_transition_model(w, nnet.transition_model)
    w.token("<Nnet3>")
    w.raw("\n" + nnet.config + "\n")
    w.token("<NumComponents>")
    w.int(len(nnet.components))
    w.newline()
    for component in nnet.components:
        w.token("<ComponentName>")
        w.token(component.name)
        _write_block(w, component)
        w.newline()
    w.token("</Nnet3>")
    if nnet.transition_model is not None:
        w.token("<LeftContext>")
        w.int(nnet.left_context)  # type: ignore[arg-type]
        w.token("<RightContext>")
        w.int(nnet.right_context)  # type: ignore[arg-type]
        w.token("<Priors>")
        w.vector(nnet.priors)  # type: ignore[arg-type]
    return w.getvalue()


def write_nnet(path: str | os.PathLike[str], nnet: NnetFile, *, binary: bool = True) -> None:
    """Write `nnet` to `path` as Kaldi does, atomically: the bytes are made first, written to a
    temporary file beside `path` and moved over it, so a failure leaves any existing file untouched."""
    atomic_write(path, format_nnet(nnet, binary=binary))
