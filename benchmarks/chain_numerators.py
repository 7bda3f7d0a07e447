"""How fast chain egs' numerators are made on the fly (`stream_chain_data`'s reading thread): every chunk of the
digits recipe's training utterances made once, as the first epoch of `digits_chain.train` makes them.

    python benchmarks/chain_numerators.py --folder /tmp/digits [--task digits|commands] [--rounds 3]

Needs the recipe's cached corpus (`digits_recipe.py --folder FOLDER` makes it, with flite) and writes its
features to FOLDER/numerators. Prints the seconds per round to make every chunk's numerator (the utterance's
`phone_numerator`, then `chunk_numerator` with the denominator's normalization) and features.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import digits_chain
import digits_recipe
from machine import cpu_model


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--folder", required=True, help="digits_recipe.py's folder (its corpus is read from it)")
    p.add_argument("--task", choices=("digits", "commands"), default="digits")
    p.add_argument("--train", type=int, default=900)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    import kaldiio

    from symnet.chain import Topology, estimate_phone_lm, phone_lm_denominator
    from symnet.datasets import CorpusSet, synthesise_corpus
    from symnet.train import stream_chain_data

    sets = [CorpusSet("train", digits_recipe.voice_sets("flite")[0], args.train)]
    corpus = synthesise_corpus(Path(args.folder) / "corpus", args.task, sets=sets, seed=1, log=None)
    utterances = corpus.sets["train"]
    folder = Path(args.folder) / "numerators"
    folder.mkdir(parents=True, exist_ok=True)
    features = corpus.dataset("train").features
    scp = folder / "feats.scp"
    kaldiio.save_ark(str(folder / "feats.ark"), {u.id: f for u, f in zip(utterances, features)}, scp=str(scp))
    lengths = {u.id: corpus.phone_lengths(u) for u in utterances}
    topology = Topology.chain(range(1, len(corpus.phones) + 1))
    lm = estimate_phone_lm([pairs[:, 0].tolist() for pairs in lengths.values()], num_extra_lm_states=2000)
    den = phone_lm_denominator(lm, topology)
    print(f"CPU: {cpu_model()}; {len(utterances)} utterances ({args.task})")
    for r in range(args.rounds):
        stream = stream_chain_data(
            f"scp:{scp}", lengths, topology, den, num_frames=digits_chain.NUM_FRAMES,
            frame_subsampling_factor=digits_chain.SUBSAMPLING, left_context=29, right_context=29,  # the rows only
        )  # fmt: skip
        chunks = stream.train
        started = time.perf_counter()
        for position in range(len(chunks.places)):
            chunks._item(position)  # what fit's reading thread does for each chunk the first epoch
        print(f"round {r + 1}: {len(chunks.places)} chunks' numerators in {time.perf_counter() - started:.2f} s")


if __name__ == "__main__":
    main()
