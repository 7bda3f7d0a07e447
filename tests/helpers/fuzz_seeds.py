"""The valid files the fuzz campaigns mutate, one folder per file type, written once per test session.

Kaldi text and binary models (the hand-written ones of `helpers.kaldi_models`
and real Kaldi models of the corpus, `helpers.kaldi_oracle`),
Kaldi configs and an xconfig (the repository's examples and corpus configs),
a symnet model file, a checkpoint (of `helpers.fuzz_runner.checkpoint_network`), Kaldi archives and
scp files, and Kaldi's egs, chain egs, den.fst files and topologies (tests/data).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from helpers import EXAMPLES, REPO, kaldi_models

#: Corpus cases whose models and configs seed the Kaldi campaigns (one of each family, small).
CORPUS_CASES = ("a_docs_example", "c01_tdnn_relu_bn", "b06_ifdefined_offsets", "b21_two_outputs")


def _corpus_files(name: str) -> list[Path]:
    from helpers.kaldi_oracle import corpus_dir

    cases = corpus_dir() / "cases"
    return [cases / case / name for case in CORPUS_CASES if (cases / case / name).is_file()]


def write_seeds(folder: Path) -> dict[str, list[str]]:
    """Write the seed files under `folder`; `{file type: [paths]}`."""
    import symnet
    from symnet._src.kaldi_io.tables import iter_table  # noqa: F401  (the readers must import)
    from symnet.kaldi import format_model, parse_model, read_network

    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, list[str]] = {
        k: []
        for k in (
            "kaldi_text",
            "kaldi_binary",
            "config",
            "xconfig",
            "symnet_model",
            "ark",
            "ark_text",
            "scp",
            "checkpoint",
            "egs",
            "egs_text",
            "cegs",
            "fst",
            "topology",
        )
    }

    def put(kind: str, name: str, data: bytes) -> None:
        path = folder / name
        path.write_bytes(data)
        out[kind].append(str(path))

    texts = {"nnet.raw": kaldi_models.NNET_TEXT.encode(), "am.mdl": kaldi_models.AM_TEXT.encode()}
    for path in _corpus_files("model.txt"):
        texts[f"{path.parent.name}.txt"] = path.read_bytes()
    for name, data in texts.items():
        put("kaldi_text", "text-" + name, data)
        model = parse_model(data)
        put("kaldi_binary", "binary-" + name, format_model(model, binary=True, raw=not model.is_am))
    configs = sorted(EXAMPLES.glob("*.config")) + _corpus_files("net.config")
    for path in configs:
        put("config", f"{path.parent.name}-{path.name}", path.read_bytes())
    put("xconfig", "tdnnf.xconfig", (EXAMPLES / "tdnnf.xconfig").read_bytes())
    network = read_network(str(EXAMPLES / "hmm-tdnn.config"))
    model_path = folder / "hmm-tdnn.npz"
    symnet.save(model_path, network)
    out["symnet_model"].append(str(model_path))
    import kaldiio

    rng = np.random.default_rng(0)
    feats = {f"utt{i}": rng.standard_normal((5 + i, 3)).astype(np.float32) for i in range(3)}
    ali = {f"utt{i}": rng.integers(0, 4, size=5 + i).astype(np.int32) for i in range(3)}
    kaldiio.save_ark(str(folder / "feats.ark"), feats, scp=str(folder / "feats.scp"))
    kaldiio.save_ark(str(folder / "feats-cm.ark"), feats, compression_method=2)
    kaldiio.save_ark(str(folder / "ali.ark"), ali)
    kaldiio.save_ark(str(folder / "feats-text.ark"), feats, text=True)
    kaldiio.save_ark(str(folder / "ali-text.ark"), ali, text=True)
    out["ark"] += [str(folder / n) for n in ("feats.ark", "feats-cm.ark", "ali.ark")]
    out["ark_text"] += [str(folder / n) for n in ("feats-text.ark", "ali-text.ark")]
    out["scp"].append(str(folder / "feats.scp"))
    from helpers.fuzz_runner import checkpoint_network
    from symnet._src.train import checkpoint

    net, state = checkpoint_network()
    checkpoint.save(
        str(folder / "checkpoint.npz"), net, state, checkpoint.Position(3, 1, 2), {"history": []}, run={"lr": 0.01}
    )
    out["checkpoint"].append(str(folder / "checkpoint.npz"))
    data = REPO / "tests" / "data"
    out["egs"] += [str(p) for p in sorted((data / "egs").glob("egs_*.ark"))]
    out["egs_text"] += [str(p) for p in sorted((data / "egs").glob("egs_*.txt"))]
    out["cegs"] += [str(p) for p in sorted((data / "egs").glob("cegs_*"))]
    out["fst"] += [str(data / "chain" / "den.fst"), str(data / "chain-recipe" / "chain-topo" / "den.fst")]
    topologies = [data / "chain" / "phone_lm" / name for name in ("topo2", "topochain")]
    out["topology"] += [str(p) for p in topologies + sorted((data / "chain-recipe").glob("*/topo"))]
    return out
