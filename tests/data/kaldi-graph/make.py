"""Kaldi's G for a small trigram LM, for tests/decode/test_grammar.py.

    python tests/data/kaldi-graph/make.py --kaldi-bin DIR     # DIR holds arpa2fst; OpenFst's fstprint on PATH

Estimates a Witten-Bell trigram with symnet (`estimate_arpa`) from the sentences below and writes it
(`lm.arpa`) with a word symbol table (`words.txt`), then runs `arpa2fst --disambig-symbol=#0` and `fstprint`
on it: `G.txt`. The tests read these only.
"""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path

from symnet.decode import estimate_arpa

HERE = Path(__file__).resolve().parent
SENTENCES = [
    "one two three", "two two", "three one", "one", "two three one two", "oh one two", "zero oh", "one one one",
    "three two one oh", "two", "oh oh two three",
]  # fmt: skip
VOCABULARY = ["oh", "zero", "one", "two", "three", "four"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kaldi-bin", required=True)
    args = p.parse_args()
    env = {**os.environ, "PATH": f"{Path(args.kaldi_bin).resolve()}:{os.environ['PATH']}"}
    lm = estimate_arpa([s.split() for s in SENTENCES], order=3, vocabulary=VOCABULARY)
    (HERE / "lm.arpa").write_text(lm.to_text())
    symbols = ["<eps>", *sorted(VOCABULARY), "#0", "<s>", "</s>"]
    (HERE / "words.txt").write_text("".join(f"{w} {i}\n" for i, w in enumerate(symbols)))
    subprocess.run(
        "arpa2fst --disambig-symbol=#0 --read-symbol-table=words.txt lm.arpa /tmp/kaldi-graph-G.fst "
        "&& fstprint /tmp/kaldi-graph-G.fst > G.txt",
        shell=True, cwd=HERE, env=env, check=True,
    )  # fmt: skip


if __name__ == "__main__":
    main()
