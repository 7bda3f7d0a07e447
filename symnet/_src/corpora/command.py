"""`python -m symnet.datasets`: synthesise a corpus from the command line and print where it is and what it holds."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .build import default_sets, synthesise_corpus
from .errors import CorpusError
from .tasks import TASKS

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options, build (or find) the corpus, print its sets; 2 on a CorpusError, said on one line."""
    p = argparse.ArgumentParser(
        prog="python -m symnet.datasets", description="Synthesise a speech corpus (docs/corpus.md)."
    )
    p.add_argument("--folder", required=True, help="where corpora are cached (a folder per task and settings)")
    p.add_argument("--task", choices=TASKS, default="digits")
    p.add_argument("--train", type=int, default=1200, help="training utterances")
    p.add_argument("--test", type=int, default=200, help="utterances of each test set (seen and unseen voices)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=2, help="synthesis processes")
    args = p.parse_args(argv)
    try:
        corpus = synthesise_corpus(args.folder, args.task, sets=default_sets(args.train, args.test), seed=args.seed,
                                   workers=args.workers, log=lambda line: print(line, flush=True))  # fmt: skip
    except CorpusError as e:
        print(f"error: {e}")
        return 2
    print(corpus.folder)
    for s in corpus.manifest["sets"]:
        print(f"  {s['name']}: {s['utterances']} utterances ({s['left_out']} left out), {s['speakers']} voices, "
              f"{60 * s['hours']:.1f} minutes")  # fmt: skip
    return 0
