"""Reading an xconfig and expanding it, as steps/nnet3/xconfig_to_configs.py does.

`parse_xconfig(text)` reads every line into a layer object, in order (each
sees the layers before it); an `Xconfig` holds them and gives

- `config_text(which)`: `final.config` (the whole network), `ref.config`
  (the same with random stand-ins for matrices read from files, for working out
  the context) or `init.config` (what the LDA-like transform is estimated
  from; None when the xconfig has none), as Kaldi writes them;
- `config_lines(which)`: those lines as symnet's config line objects, each
  with the xconfig file, line and text it came from, so that an error found
  while building the network names the xconfig line and the layer;
- `expanded(normalized)`: `xconfig.expanded.1` / `.2` (every layer with all
  its options, before and after the descriptors are normalized);
- `matrices`: the files the layers write (the idct-layer's matrix), and
  `layer_files(folder)` their contents, each path checked to lie inside the
  output folder (`symnet._src.kaldi.text.xconfig.files`);
- `network()`: the Network of `final.config`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from ....base.atomic import atomic_write, atomic_write_all
from ....base.errors import ConfigError, SymnetError
from ....base.text import clip
from ....core.structure import Structure
from . import attention, basic, composite, convolution, gru, lstm, stats, trivial  # noqa: F401  (register the layers)
from .backend import ConfigLine, OutputNode, Source, build_network, parse_line, read_matrix_file, sized_structure
from .base import KALDI_LAYER_TYPES, LAYER_TYPES, UNSUPPORTED_LAYER_TYPES, XInput, XLayer, closest
from .files import LayerFile, kaldi_matrix_text, layer_files
from .syntax import XconfigLine, xconfig_lines

if TYPE_CHECKING:
    from ....network import Network

__all__ = ["CONFIG_NAMES", "Xconfig", "parse_xconfig", "read_xconfig", "write_kaldi_matrix"]

#: The config files xconfig_to_configs.py writes, by the name it gives them.
CONFIG_NAMES = ("init", "ref", "final")

_HEADERS = {
    "init": "# It contains the parts of the network that can be used to\n"
    "# accumulate statistics on the input features (the LDA-like transform).",
    "ref": "# It contains the entire neural network, but with the components that\n"
    "# would read fixed matrices from disk replaced with random ones; it is\n"
    "# used only to work out the left-context and right-context of the network.",
    "final": "# It contains the entire neural network.",
}


def _layer(line: XconfigLine, previous: Sequence[XLayer]) -> XLayer:
    cls = LAYER_TYPES.get(line.type)
    if cls is None and line.type in KALDI_LAYER_TYPES:
        why = UNSUPPORTED_LAYER_TYPES.get(line.type, "symnet has no expansion of it")
        raise line.error(f"layer type {line.type} is not supported by symnet ({why})")
    if cls is None:
        raise line.error(f"unknown layer type {line.type}{closest(line.type, LAYER_TYPES)}")
    return cls(line, previous)


def existing_layer(name: str, dim: int) -> XLayer:
    """A node of an existing network that the xconfig may refer to (Kaldi's `existing` layers)."""
    return XInput(XconfigLine("existing", (("name", name), ("dim", str(dim)))), [])


@attrs.frozen(eq=False)
class Xconfig:
    """The layers of an xconfig file, in order, and what they expand to (see the module doc)."""

    layers: tuple[XLayer, ...]
    file: str = "<xconfig>"

    def pairs(self, which: str) -> list[tuple[XLayer, str]]:
        """(layer, generated line) for config `which`, comment lines included."""
        if which not in CONFIG_NAMES:
            raise SymnetError(f"which must be one of {', '.join(CONFIG_NAMES)}, not {which!r}")
        return [(layer, text) for layer in self.layers for names, text in layer.lines() if which in names]

    def has(self, which: str) -> bool:
        """Whether xconfig_to_configs.py writes `which`.config (init.config only when it has an output-node)."""
        return which != "init" or any(text.startswith("output-node") for _, text in self.pairs("init"))

    def config_text(self, which: str = "final") -> str | None:
        """The text of `which`.config as Kaldi writes it (with a header and the layers' comments)."""
        if not self.has(which):
            return None
        header = f"# This file was created by symnet from the xconfig {self.file}\n{_HEADERS[which]}\n"
        return header + "\n" + "".join(text + "\n" for _, text in self.pairs(which))

    def config_lines(self, which: str = "final") -> list[ConfigLine]:
        """The lines of `which`.config as config line objects whose sources are the xconfig lines."""
        lines: list[ConfigLine] = []
        for layer, text in self.pairs(which):
            try:
                parsed = parse_line(text, file=self.file, line=layer.source.line, repeated=_repeated(layer.source))
            except ConfigError as e:
                raise layer.error(f"the generated config line is not valid ({e.message}): {clip(text)}") from None
            if parsed is not None:
                lines.append(attrs.evolve(parsed, source=_source(layer.source, parsed.source)))
        if which != "init" and not any(isinstance(line, OutputNode) for line in lines):
            raise ConfigError("the xconfig has no output (an output-layer or an output line)", file=self.file)
        return lines

    @property
    def matrices(self) -> dict[str, np.ndarray]:
        """The matrices the layers write, by file name."""
        return {name: matrix for layer in self.layers for name, matrix in layer.matrices().items()}

    def layer_files(self, folder: str | os.PathLike[str], taken: Iterable[str] = ()) -> dict[str, LayerFile]:
        """The files the layers write (Kaldi text matrices), by the paths their options give; a ConfigError naming
        the option and the line for one that is not inside `folder` (an absolute path, `..`, a link) or that is
        one of `taken` (the files symnet writes there itself)."""
        return layer_files(self.layers, folder, taken)

    def files_named(self) -> list[str]:
        """Each file a layer writes, as `path (option of layer, file:line)`: what final.config names besides itself."""
        return [
            f"{layer.config[key]} ({key} of {layer.what}, {layer.source.where})"
            for layer in self.layers
            for key in layer.writes
        ]

    def expanded(self, normalized: bool = False) -> str:
        """xconfig.expanded.1 (`normalized=False`) or xconfig.expanded.2: each layer with all its options."""
        return "".join(layer.describe(normalized) + "\n" for layer in self.layers)

    def network(
        self,
        *,
        seed: int = 0,
        base: Any = None,
        read_matrix: Callable[[str], np.ndarray] | None = None,
        which: str = "final",
    ) -> Network:
        """The Network of final.config (or of `which`.config), with its objectives; errors name the xconfig line
        and the layer.

        Matrices the layers write (the idct-layer's) are used as they are;
        other files are read with `read_matrix` (default: Kaldi text or binary, or .npy).
        ref.config reads no file: it has random matrices of the same dims where
        final.config reads one (the LDA-like transform a recipe estimates after
        writing the configs), as xconfig_to_configs.py checks the network.
        """
        lines = self.config_lines(which)
        with self._naming_the_layer():
            return build_network(lines, seed=seed, base=base, read_matrix=self._reader(read_matrix))

    def structure(
        self, *, read_matrix: Callable[[str], np.ndarray] | None = None, which: str = "final"
    ) -> tuple[Structure, dict[str, str]]:
        """`network()`'s structure and objectives, checked as it checks them, without drawing a parameter (what
        `symnet info` reads: no jax imported)."""
        lines = self.config_lines(which)
        with self._naming_the_layer():
            return sized_structure(lines, read_matrix=self._reader(read_matrix))

    def _reader(self, read_matrix: Callable[[str], np.ndarray] | None) -> Callable[[str], np.ndarray]:
        """Reads a matrix file: the layers' own (`matrices`) as they are, others with `read_matrix`."""
        generated = self.matrices
        reader = read_matrix or read_matrix_file
        return lambda path: generated[path] if path in generated else reader(path)

    @contextlib.contextmanager
    def _naming_the_layer(self) -> Iterator[None]:
        """A ConfigError of a generated line, named by the xconfig layer it came from."""
        try:
            yield
        except ConfigError as e:
            layer = next((layer for layer in self.layers if e.file == self.file and layer.source.line == e.line), None)
            if layer is None or e.message.startswith(layer.what):
                raise
            raise ConfigError(
                f"{layer.what}: {e.message}", file=e.file, line=e.line, column=e.column, text=e.text
            ) from None

    def check_contexts(self, base: Any = None) -> Network:
        """xconfig_to_configs.py's checks of the configs it writes: ref.config builds (on `base`, the existing model
        of `--existing-model`), and init.config's output needs no more context on either side than ref.config's
        (Kaldi refuses an xconfig whose output-layer delays the labels while its fixed-affine-layer does not:
        the LDA would be estimated on frames the network never sees). Returns the ref.config network."""
        reference = self.network(which="ref", base=base)
        if not self.has("init") or "output" not in dict(reference.structure.outputs):
            return reference
        initial = self.network(which="init", base=base)
        (li, ri), (lr, rr) = initial.context("output"), reference.context("output")
        if li > lr or ri > rr:
            layer = next(layer for layer, text in self.pairs("init") if text.startswith("output-node"))
            raise layer.error(
                f"init.config's output needs context ({li}, {ri}) (left, right), more than ref.config's ({lr}, {rr}); "
                "Kaldi's xconfig_to_configs.py refuses this too: it comes from a label delay at the output "
                "(output-delay), so give this layer the same delay (delay=...)"
            )
        return reference

    def config_dir_files(
        self, directory: str | os.PathLike[str], xconfig_text: str | None = None, base: Any = None
    ) -> dict[str, bytes]:
        """What xconfig_to_configs.py writes to its --config-dir, by path: a copy of the xconfig (`xconfig`, when
        `xconfig_text` is given), `xconfig.expanded.1`/`.2`, `init.config` (when the xconfig has an LDA-like
        input), `ref.config`, `final.config`, `vars` (the context of ref.config's output, as recipes read it) and
        the matrices the layers write (at the paths their options name, which must lie inside `directory`:
        `layer_files`). `base`: the existing model the xconfig adds to (`--existing-model`). Checked as
        `check_contexts` checks."""
        files: dict[str, str] = {}
        if xconfig_text is not None:
            lines = (line.strip() for line in xconfig_text.splitlines())
            files["xconfig"] = (
                f"# This file was created by symnet from the xconfig {self.file}\n"
                "# It is a copy of the source from which the config files in this directory were generated.\n\n"
                + "".join(line + "\n" for line in lines)
            )
        files["xconfig.expanded.1"] = self.expanded(False)
        files["xconfig.expanded.2"] = self.expanded(True)
        for which in CONFIG_NAMES:
            text = self.config_text(which)  # None for a config the xconfig does not make
            if text is not None:
                files[f"{which}.config"] = text
        reference = self.check_contexts(base)
        if "output" in dict(reference.structure.outputs):
            left, right = reference.context("output")
            files["vars"] = f"model_left_context={left}\nmodel_right_context={right}\n"
        out = {os.path.join(directory, name): text.encode("utf-8") for name, text in files.items()}
        named = self.layer_files(directory, taken=out)
        return out | {path: file.data for path, file in named.items()}

    def write_config_dir(
        self, directory: str | os.PathLike[str], xconfig_text: str | None = None, base: Any = None
    ) -> list[str]:
        """Write what xconfig_to_configs.py writes to its --config-dir (`config_dir_files`) as a whole: a failure
        leaves every file as it was. Returns the paths written. Reads no matrix file (ref.config has random
        stand-ins for them), so it runs before a recipe has estimated its lda.mat."""
        files = self.config_dir_files(directory, xconfig_text, base)
        folder = os.fspath(directory)
        atomic_write_all(files, inside={path: folder for path in self.layer_files(folder)})
        return list(files)


def _repeated(xline: XconfigLine) -> Callable[[str, str], int | None]:
    """For a config line generated from `xline` that gives a key twice (Kaldi's output-layer with bottleneck-dim
    writes max-change=0.75 before the options' max-change, and nnet3 takes the first without a word): the column
    of the option of the xconfig line whose value is so ignored, else None (nothing the user wrote is ignored)."""

    def column(key: str, ignored: str) -> int | None:
        return xline.key_column(key) if xline.value(key) == ignored else None

    return column


def _source(xline: XconfigLine, generated: Source | None) -> Source:
    """The xconfig line as the source of a generated config line; options the xconfig line sets keep columns."""
    keys = generated.options if generated is not None else ()
    options = tuple(
        (key, value, xline.key_column(key), xline.value_column(key))
        for key, value, *_ in keys
        if xline.value(key) is not None
    )
    return Source(
        xline.file,
        xline.line,
        xline.text,
        kind_column=xline.type_column,
        end_column=len(xline.text) + 1,
        options=options,
    )


def write_kaldi_matrix(path: str | os.PathLike[str], matrix: np.ndarray) -> None:
    """Write a matrix in Kaldi's text format, atomically."""
    atomic_write(path, kaldi_matrix_text(matrix).encode("utf-8"))


def parse_xconfig(
    text: str, *, file: str = "<xconfig>", existing: Mapping[str, int] | Iterable[tuple[str, int]] = ()
) -> Xconfig:
    """The layers of an xconfig text. `existing`: names and dims of nodes of a network it adds to."""
    items = existing.items() if isinstance(existing, Mapping) else existing
    previous: list[XLayer] = [existing_layer(name, dim) for name, dim in items]
    layers: list[XLayer] = []
    for line in xconfig_lines(text, file=file):
        layer = _layer(line, previous)
        previous.append(layer)
        layers.append(layer)
    if not layers:
        raise ConfigError("the xconfig is empty (no layer line)", file=file)
    return Xconfig(tuple(layers), file)


def read_xconfig(
    source: str | os.PathLike[str] | Any,
    *,
    file: str | None = None,
    existing: Mapping[str, int] | Iterable[tuple[str, int]] = (),
) -> Xconfig:
    """The layers of an xconfig file, given as a path or an open text file."""
    if hasattr(source, "read"):
        text = source.read()
        name = file or getattr(source, "name", "<xconfig>")
    else:
        with open(source, encoding="utf-8", errors="replace") as f:
            text = f.read()
        name = file or os.fspath(source)
    return parse_xconfig(text, file=str(name), existing=existing)
