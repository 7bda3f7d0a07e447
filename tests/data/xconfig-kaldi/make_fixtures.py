"""Expand the xconfig cases with Kaldi's own xconfig library: the expected files of tests/kaldi/test_xconfig_kaldi.py.

    mkdir -p /tmp/kaldi-x
    git -C KALDI archive HEAD egs/wsj/s5/steps | tar -x -C /tmp/kaldi-x
    python3 tests/data/xconfig-kaldi/make_fixtures.py /tmp/kaldi-x/egs/wsj/s5/steps [CASE ...]

For every `cases/NAME.xconfig` (or the CASEs named), this does what Kaldi's
steps/nnet3/xconfig_to_configs.py does short of running nnet3-init (which
needs Kaldi's binaries): it reads the xconfig with Kaldi's `read_xconfig_file`,
prints each layer (xconfig.expanded.1), normalizes the descriptors and prints
them again (xconfig.expanded.2), and collects each layer's `get_full_config()`
lines by config file (init.config only when it has an output-node, as Kaldi
writes it). `NAME.expected` in expected.tar.xz (xz keeps the 0.8 MB of
configs at about 25 kB) gets them as sections

    ==> xconfig.expanded.1 <==
    ...
    ==> init.config <==
    ...

without the header comments xconfig_to_configs.py writes first, and a
`==> file NAME <==` section for each file a layer writes (the idct-layer's
matrix; the case runs in an empty scratch folder, where the folders of every
`affine-transform-file=` path are made first, as a recipe makes $dir/configs).
Comment lines
`# existing name=NAME dim=DIM` declare nodes of an existing network the
xconfig adds to, as xconfig_to_configs.py's --existing-model gives them
(Kaldi's XconfigExistingLayer). A case Kaldi refuses gets a
single `==> error <==` section with the exception's type and first line. Runs
with any Python 3 and imports nothing of symnet.
"""

from __future__ import annotations

import contextlib
import io
import lzma
import os
import re
import sys
import tarfile
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "cases")
EXPECTED = os.path.join(HERE, "expected.tar.xz")
CONFIGS = ("init", "ref", "final")


def existing_nodes(path: str) -> list[tuple[str, int]]:
    """The `# existing name=NAME dim=DIM` comment lines of a case: nodes of the network it adds to."""
    with open(path) as f:
        found = (re.match(r"# existing name=(\S+) dim=(\d+)$", line.strip()) for line in f)
        return [(match.group(1), int(match.group(2))) for match in found if match]


def expand(parser, path: str) -> str:
    """The sections of one case, as text (run in an empty folder: the files the layers write become sections)."""
    home = os.getcwd()
    with tempfile.TemporaryDirectory() as scratch:
        os.chdir(scratch)
        try:
            return _expand(parser, path, scratch)
        finally:
            os.chdir(home)


def _expand(parser, path: str, scratch: str) -> str:
    sections: list[tuple[str, list[str]]] = []
    with open(path) as f:  # the folders of the files layers write exist, as a recipe makes $dir/configs
        for folder in re.findall(r"affine-transform-file=(\S+)/[^/\s]+", f.read()):
            if not os.path.isabs(folder) and ".." not in folder.split("/"):
                os.makedirs(os.path.join(scratch, folder), exist_ok=True)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            existing: list = []  # the nodes of an existing network (--existing-model), from `# existing` lines
            for name, dim in existing_nodes(path):
                existing.append(parser.xlayers.XconfigExistingLayer("existing", {"name": name, "dim": dim}, existing))
            layers = parser.read_xconfig_file(path, existing)
            sections.append(("xconfig.expanded.1", [str(layer) for layer in layers]))
            expanded2 = []
            for layer in layers:
                layer.normalize_descriptors()
                expanded2.append(str(layer))
            sections.append(("xconfig.expanded.2", expanded2))
            by_config: dict[str, list[str]] = {}
            for layer in layers:
                for name, line in layer.get_full_config():
                    by_config.setdefault(name, []).append(line)
    except Exception as e:  # Kaldi refuses the xconfig: the test expects symnet to refuse it too
        message = str(e.args[0]) if e.args else ""
        return f"==> error <==\n{type(e).__name__}: {message.splitlines()[0] if message else ''}\n"
    for name in sorted(by_config, key=lambda n: (CONFIGS.index(n) if n in CONFIGS else len(CONFIGS), n)):
        lines = by_config[name]
        if name == "init" and not any(line.startswith("output-node") for line in lines):
            continue  # xconfig_to_configs.py writes no init.config then
        sections.append((f"{name}.config", lines))
    for folder, _, files in sorted(os.walk(scratch)):
        for file in sorted(files):
            with open(os.path.join(folder, file)) as f:
                written = f.read().splitlines()
            sections.append((f"file {os.path.relpath(os.path.join(folder, file), scratch)}", written))
    return "".join(f"==> {title} <==\n" + "".join(line + "\n" for line in lines) for title, lines in sections)


def write_expected(expected: dict[str, str]) -> None:
    """EXPECTED: one NAME.expected member per case, sorted, with fixed metadata (the same input, the same bytes)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in sorted(expected):
            data = expected[name].encode("utf-8")
            info = tarfile.TarInfo(f"{name}.expected")
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    with open(EXPECTED, "wb") as f:
        f.write(lzma.compress(buffer.getvalue(), preset=9))


def read_expected() -> dict[str, str]:
    """The expected sections of every case, by name, from EXPECTED."""
    if not os.path.exists(EXPECTED):
        return {}
    with tarfile.open(EXPECTED, "r:xz") as tar:
        return {
            member.name[: -len(".expected")]: tar.extractfile(member).read().decode("utf-8")
            for member in tar.getmembers()
        }


def main(argv: list[str]) -> int:
    if not argv or not os.path.isdir(os.path.join(argv[0], "libs", "nnet3", "xconfig")):
        print(__doc__, file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.abspath(argv[0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Kaldi's scripts compare ints with `is not`
        import libs.nnet3.xconfig.parser as parser  # Kaldi's, from argv[0]
    cases = sorted(f[: -len(".xconfig")] for f in os.listdir(CASES) if f.endswith(".xconfig"))
    expected = {name: text for name, text in read_expected().items() if name in cases}
    for name in argv[1:] or cases:
        expected[name] = expand(parser, os.path.join(CASES, name + ".xconfig"))
        print(f"{name}: {'error' if expected[name].startswith('==> error') else 'ok'}")
    write_expected(expected)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
