"""Every writer of an output file, as `path -> None`, for the output-path and fault tests (and their children).

    writers = make_writers(make_inputs(folder))
    writers["symnet.save"]("out.npz")

CLI writers run `symnet._src.app.cli.main` in-process and raise a SymnetError with its
one-line message when it exits with an error.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np

from helpers import EXAMPLES
from helpers.kaldi_models import NNET_TEXT

#: The writers, by name: the library's and the command line's.
WRITERS = [
    "atomic_write",
    "checkpoint.save",
    "symnet.save",
    "write_model text",
    "write_model binary",
    "symnet copy",
    "symnet init",
    "symnet xconfig -o",
    "symnet compute ark:",
    "symnet compute ark,t:",
]


def make_inputs(folder: Path) -> dict[str, Path]:
    """What the writers read: a Kaldi model (input dim 3), features for it, a config, an xconfig."""
    import kaldiio

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "nnet.raw").write_text(NNET_TEXT)
    rng = np.random.default_rng(0)
    feats = {f"u{i}": rng.standard_normal((6 + i, 3)).astype(np.float32) for i in range(2)}
    kaldiio.save_ark(str(folder / "feats.ark"), feats)
    return {
        "model": folder / "nnet.raw",
        "feats": folder / "feats.ark",
        "config": EXAMPLES / "hmm-tdnn.config",
        "xconfig": EXAMPLES / "tdnnf.xconfig",
    }


def cli(*args: str) -> None:
    """`symnet ARGS`, in-process; a SymnetError with the printed message if it fails."""
    from symnet._src.app.cli import main
    from symnet.errors import SymnetError

    err = io.StringIO()
    status = main(list(args), stdout=io.StringIO(), stderr=err)
    if status:
        raise SymnetError(err.getvalue().strip())


def make_writers(inputs: dict[str, Path]) -> dict[str, Callable[[str], None]]:
    import optax

    import symnet
    from symnet import Input, Network, Normal, Weight
    from symnet._src.base.atomic import atomic_write
    from symnet._src.train import checkpoint as ckpt
    from symnet.kaldi import parse_model, read_network, write_model

    net = Network(Input("input", 2) @ Weight(Normal((2, 3), 1.0), name="w"))
    state = optax.sgd(0.1).init(net.params)
    model = parse_model(NNET_TEXT.encode())
    network = read_network(str(inputs["config"]))
    model_file, feats = str(inputs["model"]), f"ark:{inputs['feats']}"
    return {
        "atomic_write": lambda p: atomic_write(p, b"symnet\n" * 100),
        "checkpoint.save": lambda p: ckpt.save(p, net, state, ckpt.Position(1, 0, 1)),
        "symnet.save": lambda p: symnet.save(p, network),
        "write_model text": lambda p: write_model(p, model, binary=False),
        "write_model binary": lambda p: write_model(p, model, binary=True),
        "symnet copy": lambda p: cli("copy", model_file, p),
        "symnet init": lambda p: cli("init", str(inputs["config"]), p),
        "symnet xconfig -o": lambda p: cli("xconfig", "-o", p, str(inputs["xconfig"])),
        "symnet compute ark:": lambda p: cli("compute", model_file, feats, f"ark:{p}"),
        "symnet compute ark,t:": lambda p: cli("compute", model_file, feats, f"ark,t:{p}"),
    }


def main() -> None:
    """`python -m helpers.writers NAME INPUTS_FOLDER PATH [FILE_SIZE_LIMIT]`: run one writer, print the outcome
    as JSON (`error`: its message, `symnet`/`os`: its kinds), with writes beyond the limit failing (EFBIG) as
    on a full disk."""
    import json
    import resource
    import signal
    import sys

    name, folder, path = sys.argv[1:4]
    writers = make_writers(make_inputs(Path(folder)))
    if len(sys.argv) > 4:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        limit = int(sys.argv[4])
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    from symnet.errors import SymnetError

    try:
        writers[name](path)
        outcome: dict[str, object] = {"error": None}
    except Exception as e:
        outcome = {
            "error": str(e),
            "type": type(e).__name__,
            "symnet": isinstance(e, SymnetError),
            "os": isinstance(e, OSError),
        }
    print(json.dumps(outcome))


if __name__ == "__main__":
    main()
