"""The recipe's CTC model: a BLSTM over phones, trained with CTC on whole utterances and decoded on a TLG graph.

- Network, as Kaldi's TDNN-BLSTM recipes write one (egs/swbd/s5c/local/chain/tuning/run_tdnn_blstm_1a.sh):
  two TDNN layers, then two BLSTM layers whose recurrences read 3 frames back (forward) and 3 ahead (backward)
  (`delay=-3` / `delay=3`), so the outputs at every third frame need the layers at every third frame only; a
  log-softmax over blank (output 0) and the phones (output k: the corpus's phone k, "pau" included).
- Targets: each frame's phone id, from the synthesiser's segments; CTC collapses repeats and drops nothing else
  (a phone said twice in a row is one token: CTC needs a blank between them, so rare in digits).
- Training: `fit(objective="ctc", frame_subsampling_factor=3)` on whole utterances (chunk widths from the
  longest training utterance down by 90 frames, so each is computed at the smallest that holds it), minibatches
  of 16 utterances, Adam with the learning rate warmed up over the first tenth of the steps to 3e-3, then a
  cosine decay to a twentieth of it.
- Graph: `make_tlg` of the phone lexicon (optional "pau" between words) and the task's grammar, decoded on the
  log-softmax outputs of every third frame at acoustic scale 1.0.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from recipe_lang import recipe_lang

SUBSAMPLING = 3
CELLS, PROJECTION, TDNN = 256, 128, 256
BATCH = 16
LEARNING_RATE = 3e-3


def network(dim: int, outputs: int, seed: int = 0) -> Any:
    """The TDNN-BLSTM, with `outputs` log-softmax outputs (blank and the phones)."""
    from symnet import Append, Input, LogSoftmax, Network, ReLU
    from symnet.layers import LSTM, Affine, TimeConv

    h = ReLU(TimeConv(Input("input", dim), TDNN, offsets=(-2, -1, 0, 1, 2)))
    h = ReLU(TimeConv(h, TDNN, offsets=(-1, 0, 1)))
    for layer in (1, 2):
        h = Append(
            LSTM(f"blstm{layer}.forward", h, cell=CELLS, projection=PROJECTION, delay=-SUBSAMPLING),
            LSTM(f"blstm{layer}.backward", h, cell=CELLS, projection=PROJECTION, delay=SUBSAMPLING),
        )
    return Network(LogSoftmax(Affine(h, outputs)), seed=seed)


def widths(lengths: Sequence[int], step: int = 90) -> tuple[int, ...]:
    """Chunk widths that hold every utterance whole: the longest (rounded up to a multiple of the subsampling),
    then every `step` frames below it."""
    top = -(-max(lengths) // SUBSAMPLING) * SUBSAMPLING
    return tuple(range(top, 0, -step))


def train(corpus: Any, features: Sequence[np.ndarray], epochs: int, seed: int = 0) -> tuple[Any, float, list[Any]]:
    """The trained network, the wall seconds of training and the history (`seed`: initial parameters, order)."""
    import optax

    from symnet.train import fit

    utterances = corpus.sets["train"]
    labels = [np.asarray(u.phone_ids, np.int32) for u in utterances]
    net = network(features[0].shape[1], len(corpus.phones) + 1, seed)
    chunk = widths([len(f) for f in features])
    steps = epochs * -(-len(features) // BATCH)
    rate = optax.warmup_cosine_decay_schedule(LEARNING_RATE / 10, LEARNING_RATE, steps // 10, steps, LEARNING_RATE / 20)
    started = time.perf_counter()
    result = fit(
        net, (list(features), labels), optax.adam(rate), objective="ctc", frame_subsampling_factor=SUBSAMPLING,
        chunk=chunk, epochs=epochs, batch_size=BATCH, progress=False, seed=seed,
    )  # fmt: skip
    return result.network, time.perf_counter() - started, list(result.history)


def decoding_graph(
    lexicon: dict[str, list[tuple[str, ...]]], words: list[str], phones: tuple[str, ...], grammar: Any
) -> Any:
    """TLG over the task's grammar (`grammar(lang)`: G for the lang's word ids), each word's phones as CTC tokens
    (token k: network output k), optional "pau" at the start and after each word; the `DecodingGraph` and the
    word names by id."""
    from symnet.decode import DecodingGraph, ctc_transition_pdfs, make_tlg

    lang = recipe_lang(lexicon, words, phones)
    tlg = make_tlg(lang, grammar(lang), num_outputs=len(phones) + 1)
    return DecodingGraph.of(tlg, ctc_transition_pdfs(len(phones) + 1)), {i: w for w, i in lang.words.items()}
