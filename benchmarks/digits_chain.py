"""The digits recipe's chain model: a TDNN-F trained with LF-MMI on chain egs made on the fly, as Kaldi's
mini_librispeech recipe (local/chain/tuning/run_tdnn_1k.sh) trains one, scaled down to the corpus.

- Numerators: each utterance's phones and their lengths from the synthesiser's segments
  (`Corpus.phone_lengths`: a phone said twice in a row is two instances, as `ali-to-phones --write-lengths`
  gives them), Kaldi's chain topology (one state: a phone's first frame pdf-class 0, later frames pdf-class 1)
  with monophone pdfs (no decision tree: 2 per phone), tolerances 5 and 5, frame subsampling 3.
- Denominator: `estimate_phone_lm` of the training utterances' phone sequences (chain-est-phone-lm, 4-gram,
  `--num-extra-lm-states=2000` as Kaldi's chain recipes) made into a graph by `phone_lm_denominator`.
- Egs: `stream_chain_data` on the features written as a Kaldi archive (`--num-frames=90,60,42`: the utterances
  are short), the network's
  context; as nnet3-chain-get-egs with the normalization FST).
- Network: the recipe's xconfig (tdnn1, TDNN-F layers of time strides 1, 1, 1, 0, 3, 3, 3, 3, prefinal layers,
  `output` without log-softmax and `output-xent`), dimensions 384 / bottleneck 64 for the corpus's size; the
  recipe's l2 and orthonormal constraints; xent-regularize 0.1, leaky HMM 0.1.
- Training: Kaldi's rules with natural gradient (`kaldi_rules(..., natural_gradient=True)`: nnet3-chain-train's
  update), minibatches of 64 (`drop_partial`: a chunk width's egs that do not fill one are left out of the
  epoch, as nnet3-chain-merge-egs leaves them), the learning rate decaying epoch by epoch from 0.002 to 0.0002
  as `kaldi_chain.py` gives Kaldi.
- Graph: HCLG of the chain model (`chain_model`, self-loop scale 1.0), decoded at acoustic scale 1.0 on every
  third output frame, as Kaldi decodes chain models.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kaldi_chain import LEARNING_RATES, MINIBATCH
from recipe_lang import recipe_lang

XENT_REGULARIZE = 0.1
LEAKY_HMM = 0.1
NUM_FRAMES = "90,60,42"  # utterances of 42 to 319 frames (median 148): shorter chunks than the recipe's 140,100,160
SUBSAMPLING = 3


def xconfig(dim: int, pdfs: int, width: int = 384, bottleneck: int = 64) -> str:
    """run_tdnn_1k.sh's network (no i-vectors, so no LDA layer), narrower."""
    tdnn = "l2-regularize=0.03"
    tdnnf = f"l2-regularize=0.03 bypass-scale=0.66 dim={width} bottleneck-dim={bottleneck}"
    lines = [
        f"input dim={dim} name=input",
        f"relu-batchnorm-layer name=tdnn1 {tdnn} input=Append(-1,0,1) dim={width}",
        *(f"tdnnf-layer name=tdnnf{i} {tdnnf} time-stride={s}" for i, s in enumerate((1, 1, 1, 0, 3, 3, 3, 3), 2)),
        "linear-component name=prefinal-l dim=192 l2-regularize=0.03 orthonormal-constraint=-1.0",
        f"prefinal-layer name=prefinal-chain input=prefinal-l l2-regularize=0.03 big-dim={width} small-dim=192",
        f"output-layer name=output include-log-softmax=false dim={pdfs} l2-regularize=0.015",
        f"prefinal-layer name=prefinal-xent input=prefinal-l l2-regularize=0.03 big-dim={width} small-dim=192",
        f"output-layer name=output-xent dim={pdfs} learning-rate-factor={0.5 / XENT_REGULARIZE} l2-regularize=0.015",
    ]
    return "\n".join(lines) + "\n"


def train(
    corpus: Any,
    features: Sequence[np.ndarray],
    folder: Path,
    epochs: int,
    seed: int = 0,
    natural_gradient: bool = True,
) -> tuple[Any, float, list[Any]]:
    """The trained network, the wall seconds of training (phone LM, denominator and egs index included) and the
    history. `seed`: the network's initial parameters, the egs' chunks and the minibatches' order;
    `natural_gradient`: Kaldi's, as the recipe trains (False: plain SGD with the same rules)."""
    import kaldiio

    from symnet.chain import ChainOptions, Topology, estimate_phone_lm, phone_lm_denominator
    from symnet.kaldi.xconfig import parse_xconfig_network
    from symnet.train import SkippedDataWarning, stream_chain_data

    folder.mkdir(parents=True, exist_ok=True)
    utterances = corpus.sets["train"]
    kaldiio.save_ark(
        str(folder / "feats.ark"), {u.id: f for u, f in zip(utterances, features)}, scp=str(folder / "feats.scp")
    )
    started = time.perf_counter()
    lengths = {u.id: corpus.phone_lengths(u) for u in utterances}
    phones = range(1, len(corpus.phones) + 1)
    topology = Topology.chain(phones)
    pdfs = 2 * len(corpus.phones)
    lm = estimate_phone_lm([pairs[:, 0].tolist() for pairs in lengths.values()], num_extra_lm_states=2000)
    den = phone_lm_denominator(lm, topology)
    network = parse_xconfig_network(xconfig(features[0].shape[1], pdfs), seed=seed)
    left, right = network.context()
    with warnings.catch_warnings():  # a line for all the utterances left out, below, not a warning for each
        warnings.simplefilter("ignore", SkippedDataWarning)
        cegs = stream_chain_data(
            f"scp:{folder / 'feats.scp'}", lengths, topology, den, num_frames=NUM_FRAMES,
            frame_subsampling_factor=SUBSAMPLING, left_context=left, right_context=right, seed=seed,
            options=ChainOptions(xent_regularize=XENT_REGULARIZE, leaky_hmm_coefficient=LEAKY_HMM),
            xent_output="output-xent",
        )  # fmt: skip
    if cegs.train.skipped:  # on_error="stop": only those shorter than every chunk size, as Kaldi leaves them out
        left_out = dict(cegs.train.skipped)
        frames = sorted(len(f) for u, f in zip(utterances, features) if u.id in left_out)
        print(f"  chain egs: left out {len(frames)} utterances shorter than every chunk size ({NUM_FRAMES}): "
              f"{frames[0]}-{frames[-1]} frames")  # fmt: skip
    return fit_chain(network, cegs, epochs, seed, started, natural_gradient)


def train_on_kaldi_egs(folder: Path, epochs: int, seed: int = 0) -> tuple[Any, float, list[Any]]:
    """symnet's chain training (`train`'s network, rules and schedule) on the egs Kaldi's own nnet3-chain-get-egs
    wrote for the same features and alignments (`kaldi_chain.train`'s FOLDER/cegs.ark, `stream_cegs`), with
    Kaldi's den.fst and the network Kaldi trained (FOLDER/network.xconfig): both toolkits' trainers on the same
    examples. The wall seconds are of training alone (Kaldi made the egs)."""
    from symnet.chain import ChainOptions, read_fst
    from symnet.kaldi.xconfig import parse_xconfig_network
    from symnet.train import stream_cegs

    started = time.perf_counter()
    network = parse_xconfig_network((folder / "network.xconfig").read_text(), seed=seed)
    cegs = stream_cegs(
        str(folder / "cegs.ark"), read_fst(str(folder / "den.fst")), xent_output="output-xent",
        options=ChainOptions(xent_regularize=XENT_REGULARIZE, leaky_hmm_coefficient=LEAKY_HMM),
    )  # fmt: skip
    return fit_chain(network, cegs, epochs, seed, started)


def fit_chain(
    network: Any, cegs: Any, epochs: int, seed: int, started: float, natural_gradient: bool = True
) -> tuple[Any, float, list[Any]]:
    """`fit` of `network` on chain egs `cegs` (a `ChainEgsStream`) with Kaldi's rules and the recipe's schedule,
    printing the compilations and each epoch's step times: the trained network, the wall seconds since `started`
    and the history."""
    import jax.monitoring
    import optax

    from symnet.train import fit, kaldi_rules, steps_per_epoch

    # as nnet3-chain-merge-egs --minibatch-size=64 merges them: a width's egs that do not fill a minibatch are left out
    batching = {"batch_size": MINIBATCH, "drop_partial": True, "frame_subsampling_factor": SUBSAMPLING}
    steps = steps_per_epoch(network, cegs.train, **batching)
    first, last = LEARNING_RATES  # Kaldi's, decaying exponentially epoch by epoch (kaldi_chain.py)
    rate = optax.exponential_decay(first, steps, (last / first) ** (1 / max(epochs - 1, 1)), staircase=True)
    rules = kaldi_rules(network, learning_rate=rate, natural_gradient=natural_gradient)
    steps_of: list[Any] = []
    compiled: list[float] = []  # seconds of each XLA compilation while training (jax.monitoring's events)

    def on_event(event: str, seconds: float, **_: Any) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            compiled.append(seconds)

    jax.monitoring.register_event_duration_secs_listener(on_event)
    try:
        result = fit(
            network, cegs.train, rules, objective=cegs.objective, epochs=epochs, progress=False, seed=seed,
            on_step=steps_of.append, **batching,
        )  # fmt: skip
    finally:
        jax.monitoring.unregister_event_duration_listener(on_event)
    seconds = time.perf_counter() - started
    big = [s for s in compiled if s >= 1.0]
    print(
        f"  chain: {len(big)} compilations of 1 s or more, {sum(big):.1f} s ({', '.join(f'{s:.1f}' for s in big)}); "
        f"{len(compiled) - len(big)} shorter ones, {sum(compiled) - sum(big):.1f} s"
    )
    for epoch in range(epochs):
        steps_in = [s for s in steps_of if s.epoch == epoch]
        step_seconds = sorted(s.seconds for s in steps_in)
        waited, median = sum(s.waited for s in steps_in), step_seconds[len(step_seconds) // 2]
        print(
            f"  chain epoch {epoch}: {sum(step_seconds):.1f} s in {len(steps_in)} steps, of which {waited:.1f} s "
            f"waiting for egs; median step {median:.3f} s"
        )
    return result.network, seconds, list(result.history)


def decoding_graph(
    lexicon: dict[str, list[tuple[str, ...]]], words: list[str], phones: tuple[str, ...], grammar: Any
) -> Any:
    """HCLG of the chain model (`chain_model`) over `grammar(lang)` with optional silence, as
    `digits_recipe.decoding_graph` builds the cross-entropy model's; the graph and the word names by id."""
    from symnet.decode import DecodingGraph, chain_model, make_hclg

    lang = recipe_lang(lexicon, words, phones)
    model = chain_model(list(range(1, len(phones) + 1)))
    hclg = make_hclg(lang, grammar(lang), model, self_loop_scale=1.0)
    return DecodingGraph.of(hclg, model.transition_pdfs()), {i: w for w, i in lang.words.items()}
