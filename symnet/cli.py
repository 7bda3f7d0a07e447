"""The `symnet` command line, in the spirit of Kaldi's nnet3 tools.

    symnet info MODEL_OR_CONFIG          what nnet3-info prints: dims, context, parameters, nodes, components
    symnet init [--seed N] [EXISTING] CONFIG OUT
                                         a model from a Kaldi config (nnet3-init); with EXISTING, the config
                                         adds to or overrides that model
    symnet train CONFIG_OR_MODULE (--data builtin:hmm | --feats RSPEC --targets RSPEC) --out MODEL
                                         train with symnet.train.fit and write the model

MODEL_OR_CONFIG is a symnet model file (`symnet init`'s output, see
`symnet.kaldi.network.save_model`) or a Kaldi nnet3 config file. OUT is
written atomically: on any error it is left as it was (or absent).

Errors in the user's input print one line, the symnet error text, to stderr
and exit with status 1; usage errors exit with status 2 (argparse's rule).
"""

from __future__ import annotations

import argparse
import sys
import warnings
import zipfile
from typing import Any, Sequence, TextIO

import numpy as np

from .errors import SymnetError

PROG = "symnet"


def _load(path: str, seed: int = 0) -> Any:
    """A KaldiNetwork from a model file or a config file."""
    from .kaldi.network import load_model, read_network

    if zipfile.is_zipfile(path):
        return load_model(path)
    return read_network(path, seed=seed)


def _components(network: Any) -> dict[str, Any]:
    from .components.base import Component
    from .network import _walk

    found: dict[str, Any] = {}
    for layer in _walk([layer for _, layer in network.structure.outputs]):
        if isinstance(layer, Component):
            found.setdefault(layer.name, layer)
    return found


def info_lines(kaldi_network: Any) -> list[str]:
    """The lines `symnet info` prints for a KaldiNetwork (or a Network)."""
    from .components.base import trainable_mask
    from .kaldi.config import ComponentLine, ComponentNode, DimRangeNode, InputNode, OutputNode
    from .kaldi.descriptor_text import write_descriptor
    from .kaldi.network import KaldiNetwork, _descriptor_dim, network_config_lines

    if not isinstance(kaldi_network, KaldiNetwork):
        kaldi_network = KaldiNetwork(kaldi_network)
    net = kaldi_network.network
    lines = network_config_lines(kaldi_network, exact=False)
    components = _components(net)
    dims: dict[str, int] = {}
    for line in lines:
        if isinstance(line, InputNode):
            dims[line.name] = line.dim
        elif isinstance(line, ComponentNode):
            dims[line.name] = components[line.component].output_dim
        elif isinstance(line, DimRangeNode):
            dims[line.name] = line.dim
    out_dims = {line.name: _descriptor_dim(line.descriptor, dims, line) for line in lines
                if isinstance(line, OutputNode)}
    output_names = [name for name, _ in net.structure.outputs]
    default = "output" if "output" in output_names else output_names[0]
    out: list[str] = [
        f"input-dim: {dims.get('input', -1) if isinstance(_line(lines, 'input'), InputNode) else -1}",
        f"ivector-dim: {dims.get('ivector', -1) if isinstance(_line(lines, 'ivector'), InputNode) else -1}",
        f"output-dim: {out_dims[default]}",
    ]
    try:
        left, right = net.context(default)
        out += [f"left-context: {left}", f"right-context: {right}"]
    except SymnetError as e:
        reason = str(e).splitlines()[0]
        out += [f"left-context: unknown ({reason})", "right-context: unknown"]
    mask = trainable_mask(net)
    trainable = sum(int(np.prod(np.shape(v))) for n, v in net.params.items() if mask.get(n, True))
    fixed = sum(int(np.prod(np.shape(v))) for n, v in net.params.items() if not mask.get(n, True))
    out.append(f"num-parameters: {trainable}")
    if fixed:
        out.append(f"num-fixed-parameters: {fixed}")
    for line in lines:
        if isinstance(line, ComponentLine):
            continue
        text = line.to_text()
        if isinstance(line, ComponentNode):
            component = components[line.component]
            text += f" input-dim={component.input_dim} output-dim={component.output_dim}"
        elif isinstance(line, OutputNode):
            text = (f"output-node name={line.name} input={write_descriptor(line.descriptor)} "
                    f"dim={out_dims[line.name]} objective={line.objective}")
        out.append(text)
    for line in lines:
        if not isinstance(line, ComponentLine):
            continue
        component = components[line.name]
        shapes = []
        counts = {True: 0, False: 0}  # trainable or fixed -> values
        for field in component.param_fields:
            name = getattr(getattr(component, field), "name", None)
            if name in net.params:
                shape = tuple(np.shape(net.params[name]))
                counts[mask.get(name, True)] += int(np.prod(shape))
                shapes.append(f"{field}=[{','.join(map(str, shape))}]")
        words = [f"component name={line.name} type={line.type}",
                 f"input-dim={component.input_dim}", f"output-dim={component.output_dim}"]
        if shapes:
            words.append(f"num-parameters={counts[True]}")
            if counts[False]:
                words.append(f"num-fixed-parameters={counts[False]}")
        words += shapes
        out.append(" ".join(words))
    return out


def _line(lines: Sequence[Any], name: str) -> Any:
    return next((line for line in lines if line.name == name and line.kind != "component"), None)


def _info(args: argparse.Namespace, stdout: TextIO) -> int:
    network = _load(args.model)
    for line in info_lines(network):
        print(line, file=stdout)
    return 0


def _init(args: argparse.Namespace, stdout: TextIO) -> int:
    from .kaldi.network import read_network, save_model

    paths = args.paths
    if len(paths) not in (2, 3):
        raise _UsageError("init takes [EXISTING] CONFIG OUT")
    base = _load(paths[0]) if len(paths) == 3 else None
    config, out = paths[-2], paths[-1]
    network = read_network(config, seed=args.seed, base=base)
    save_model(out, network)
    count = sum(int(np.prod(np.shape(v))) for v in network.params.values())
    print(f"wrote {out}: {len(network.params)} parameter arrays, {count} values", file=stdout)
    return 0


def _network_source(spec: str, seed: int) -> Any:
    """A KaldiNetwork from a model or config file, or from `module:attribute` / `file.py:attribute`.

    The attribute is a Network, a KaldiNetwork, or a function of no arguments returning one.
    """
    import importlib
    import importlib.util
    import os

    from .kaldi.network import KaldiNetwork
    from .network import Network

    if ":" not in spec or os.path.exists(spec):
        return _load(spec, seed)
    module_name, attribute = spec.rsplit(":", 1)
    if module_name.endswith(".py"):
        loader = importlib.util.spec_from_file_location("_symnet_user_network", module_name)
        if loader is None or not os.path.exists(module_name):
            raise SymnetError(f"no such file: {module_name}")
        module = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    value = getattr(module, attribute, None)
    if value is None:
        raise SymnetError(f"{module_name} has no attribute {attribute!r}")
    if callable(value) and not isinstance(value, (Network, KaldiNetwork)):
        value = value()
    if isinstance(value, Network):
        value = KaldiNetwork(value)
    if not isinstance(value, KaldiNetwork):
        raise SymnetError(f"{spec} is a {type(value).__name__}, not a Network")
    return value


def _training_data(args: argparse.Namespace) -> tuple[Any, Any]:
    """(train, valid) from `--data builtin:hmm[:SEQUENCES]` or Kaldi archives."""
    if args.data:
        parts = args.data.split(":")
        if parts[:2] != ["builtin", "hmm"] or len(parts) > 3 or (len(parts) == 3 and not parts[2].isdigit()):
            raise SymnetError(f"unknown --data {args.data!r}; the built-in task is builtin:hmm[:SEQUENCES]")
        from .datasets import HmmTask

        sequences = int(parts[2]) if len(parts) == 3 else 500
        task = HmmTask.create(seed=args.seed)
        return task.sample(sequences, seed=args.seed + 1), task.sample(max(sequences // 5, 1), seed=args.seed + 2)
    if not (args.feats and args.targets):
        raise _UsageError("give --data builtin:hmm, or --feats and --targets")
    from .train.kaldi_data import read_kaldi_data

    data = read_kaldi_data(args.feats, args.targets)
    return data, None


def _train(args: argparse.Namespace, stdout: TextIO) -> int:
    import optax

    from .kaldi.network import save_model
    from .train import fit

    source = _network_source(args.network, args.seed)
    train, valid = _training_data(args)
    objective = source.objectives.get("output", "linear")
    optimizer = {"sgd": optax.sgd, "adam": optax.adam}[args.optimizer](args.lr)
    result = fit(source.network, train, optimizer, valid=valid, epochs=args.epochs, batch_size=args.batch_size,
                 chunk=args.chunk, objective=objective, seed=args.seed, checkpoint=args.checkpoint,
                 progress=not args.quiet)
    trained = source.replace(network=result.network)
    save_model(args.out, trained)
    last = result.history[-1] if result.history else None
    if last is not None:
        summary = f"train loss {last.train_loss:.4f} accuracy {last.train_accuracy:.4f}"
        if last.valid_accuracy is not None:
            summary += f", valid loss {last.valid_loss:.4f} accuracy {last.valid_accuracy:.4f}"
        print(f"epoch {last.epoch}: {summary}", file=stdout)
    print(f"wrote {args.out}", file=stdout)
    return 0


class _UsageError(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="symnet: symbolic networks with Kaldi nnet3's engine")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    info = commands.add_parser("info", help="print a model's or config's dims, context, nodes and components",
                               description="Print what nnet3-info prints: dims, left/right context, the number of "
                                           "parameters, every node with its dims, every component with its "
                                           "parameter shapes.")
    info.add_argument("model", metavar="MODEL_OR_CONFIG", help="a symnet model file or a Kaldi nnet3 config")
    info.set_defaults(run=_info)
    init = commands.add_parser("init", help="initialise a model from a Kaldi config (nnet3-init)",
                               description="Build the network of a Kaldi nnet3 config, initialise its parameters "
                                           "as Kaldi does, and write a symnet model file (atomically). With "
                                           "EXISTING (a model or config), the config adds to or overrides it.")
    init.add_argument("--seed", type=int, default=0, help="random seed of the initialisation (default 0)")
    init.add_argument("paths", nargs="+", metavar="[EXISTING] CONFIG OUT")
    init.set_defaults(run=_init)
    train = commands.add_parser("train", help="train a network (a Kaldi config, a model, or a Python module)",
                                description="Train with symnet.train.fit: chunks with the network's context, "
                                            "one jitted step per minibatch, the output node's objective. The "
                                            "model is written atomically to --out.")
    train.add_argument("network", metavar="CONFIG_OR_MODULE",
                       help="a Kaldi config, a symnet model, or module:attribute / file.py:attribute")
    train.add_argument("--data", help="builtin:hmm[:SEQUENCES], the built-in task (default 500 sequences)")
    train.add_argument("--feats", help="features rspecifier, e.g. scp:feats.scp")
    train.add_argument("--targets", help="targets rspecifier (alignments), e.g. ark:ali.ark")
    train.add_argument("--out", required=True, help="the trained model file")
    train.add_argument("--epochs", type=int, default=3)
    train.add_argument("--batch-size", type=int, default=32)
    train.add_argument("--chunk", type=int, default=20, help="output frames per example")
    train.add_argument("--optimizer", choices=("sgd", "adam"), default="adam")
    train.add_argument("--lr", type=float, default=2e-3)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--checkpoint", help="checkpoint file: saved every epoch, resumed from if present")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(run=_train)
    return parser


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Run the command line; returns the exit status (0, or 1 after printing an error)."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            status = args.run(args, stdout)
        for warning in caught:
            print(f"{PROG} {args.command}: warning: {str(warning.message).splitlines()[0]}", file=stderr)
        return status
    except _UsageError as e:
        parser.print_usage(stderr)
        print(f"{PROG} {args.command}: error: {e}", file=stderr)
        return 2
    except SymnetError as e:
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"{PROG} {args.command}: {message}", file=stderr)
        return 1
    except OSError as e:
        where = f": {e.filename}" if e.filename else ""
        print(f"{PROG} {args.command}: {e.strerror or e}{where}", file=stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
