"""Synthetic speech corpora: digit strings and house commands said by flite's and espeak-ng's voices, as Kaldi
data directories with a lexicon and phone alignments (see docs/corpus.md; the public names are in
`symnet.datasets`)."""

from .build import CorpusSet, default_sets, synthesise_corpus
from .corpus import Corpus, Utterance, load_corpus
from .errors import CorpusError
from .tasks import TASKS, vocabulary
from .voices import TEST_VOICES, TRAIN_VOICES, Voice, parse_voice

__all__ = [
    "Corpus",
    "CorpusError",
    "CorpusSet",
    "TASKS",
    "TEST_VOICES",
    "TRAIN_VOICES",
    "Utterance",
    "Voice",
    "default_sets",
    "load_corpus",
    "parse_voice",
    "synthesise_corpus",
    "vocabulary",
]
