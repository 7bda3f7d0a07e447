"""The recipe's three decoding graphs (benchmarks/digits_recipe.py, digits_chain.py, digits_ctc.py) on the shipped
corpus samples, for both tasks and their grammars (the digit loop; the commands' trigram of the training sentences):
outputs made from each utterance's own phone segments (the synthesiser's, an oracle no network stands between)
decode to the utterance's transcript on every graph, for seen and unseen voices alike."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import REPO, unpack_corpus_samples
from symnet.datasets import load_corpus
from symnet.decode import decode

sys.path.insert(0, str(REPO / "benchmarks"))  # the recipe's modules live in benchmarks/
import digits_chain
import digits_ctc
import digits_recipe

FLOOR = -12.0  # log-likelihood of every output but the oracle's


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return unpack_corpus_samples(tmp_path_factory.mktemp("samples"))


def one_hot(labels: list[int], dim: int) -> np.ndarray:
    out = np.full((len(labels), dim), FLOOR, np.float32)
    out[np.arange(len(labels)), labels] = 0.0
    return out


def output_frames(frames: int) -> int:
    """A phone instance's frames after subsampling by 3 (at least one)."""
    return max(1, round(frames / 3))


def oracles(corpus, u) -> dict[str, np.ndarray]:
    """Per graph, the outputs that say `u`'s phone segments: per frame the pdf of a 3-state HMM's state (an instance
    of n frames held for at least 3, its frames split in three in order); chain pdfs per output frame (pdf-class 0
    on an instance's first, 1 after); CTC tokens (each instance's phone then blanks)."""
    phones = len(corpus.phones)
    lengths = corpus.phone_lengths(u).tolist()
    states = [3 * (p - 1) + j * 3 // max(3, n) for p, n in lengths for j in range(max(3, n))]
    chain = [2 * (p - 1) + (j > 0) for p, n in lengths for j in range(output_frames(n))]
    ctc = [token for p, n in lengths for token in [p] + [0] * max(1, output_frames(n) - 1)]
    return {
        "xent": one_hot(states, corpus.num_pdfs),
        "chain": one_hot(chain, 2 * phones),
        "ctc": one_hot(ctc, phones + 1),
    }


@pytest.mark.parametrize("task", ["digits", "commands"])
def test_each_graph_decodes_the_phone_segments_to_the_transcript(folder: Path, task: str) -> None:
    corpus = load_corpus(folder / task)
    words, phones, lexicon = sorted(corpus.lexicon), corpus.phones, dict(corpus.lexicon)
    grammar = digits_recipe.grammar(task, words, [list(u.words) for u in corpus.sets["train"]])
    graphs = {
        "xent": digits_recipe.decoding_graph(lexicon, words, phones, grammar),
        "chain": digits_chain.decoding_graph(lexicon, words, phones, grammar),
        "ctc": digits_ctc.decoding_graph(lexicon, words, phones, grammar),
    }
    checked = 0
    for utterances in corpus.sets.values():
        for u in utterances:
            for kind, loglikes in oracles(corpus, u).items():
                graph, names = graphs[kind]
                best = decode(graph, loglikes, acoustic_scale=1.0, beam=15.0)
                assert [names[w] for w in best.words] == list(u.words), (kind, u.id)
                checked += 1
    assert checked == 3 * sum(len(v) for v in corpus.sets.values())
