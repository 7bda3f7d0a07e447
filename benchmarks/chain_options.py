"""The digits recipe's chain training alone, with symnet's XLA options and with XLA's defaults
(`SYMNET_XLA_OPTIONS=default`), each in a fresh process with nothing compiled before it: whole training time
(compilation included), compilation, and each epoch's time and median step.

    python benchmarks/chain_options.py --folder DIR    # DIR: a digits_recipe.py folder (its corpus is reused)

The corpus is digits_recipe.py's (made there with flite, cached in DIR/corpus; made here if missing), the training
`digits_chain.train` for 6 epochs, seed 0, as the recipe trains it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from machine import header

WORK = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import digits_chain, digits_recipe
from symnet import tune_host_memory
from symnet.datasets import CorpusSet, synthesise_corpus

tune_host_memory()
folder = Path(sys.argv[2])
sets = [
    CorpusSet("train", digits_recipe.TRAIN_VOICES, 900),
    CorpusSet("seen", digits_recipe.TRAIN_VOICES, 150),
    CorpusSet("unseen", (digits_recipe.TEST_VOICE,), 150, held_out=True),
]
corpus = synthesise_corpus(folder / "corpus", "digits", sets=sets, seed=1, log=None)
features = list(corpus.dataset("train").features)
_, seconds, history = digits_chain.train(corpus, features, folder / f"chain-options-{sys.argv[3]}", 6, 0)
print(f"chain training {seconds:.1f} s; losses " + ", ".join(f"{h.train_loss:.4f}" for h in history))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--folder", required=True, help="a digits_recipe.py folder")
    args = p.parse_args()
    here = str(Path(__file__).resolve().parent)
    print(header())
    for options in ("symnet", "default"):
        env = {**os.environ, "SYMNET_XLA_OPTIONS": options}
        command = [sys.executable, "-c", WORK, here, str(Path(args.folder).resolve()), options]
        out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        lines = [line for line in out.stdout.splitlines() if "chain" in line]
        print(f"== XLA options: {options}\n" + "\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
