"""A connected-digits recognizer on synthetic speech, end to end with symnet: audio, features, alignments, a
TDNN trained with `fit`, a decoding graph, the decoder and the word error rate on a voice never heard in
training.

    apt-get install flite          # the synthesiser (Debian's; its statistical voices are of real speakers)
    python benchmarks/digits_recipe.py --folder /tmp/digits [--train 900] [--epochs 6]

1. Corpus: `symnet.datasets.synthesise_corpus`'s digit strings ("oh", "zero" to "nine", 1 to 7 digits) said by
   flite's voices, each with its speed and pitch varied and noise added at 10-30 dB SNR, 16 kHz. Training
   voices: kal16, awb, slt; test: new strings by those voices ("seen") and by rms ("unseen": no utterance of rms
   is in training). Phone alignments come from the synthesiser's own segment timings (`flite -psdur`), each
   phone's frames split into three equal HMM states; the lexicon is flite's (its phones for each word said
   alone, and the variants the utterances say: docs/corpus.md). The corpus is cached in FOLDER/corpus.
2. Features: 40 Kaldi filterbanks (`symnet.features.fbank`, dither 0) with per-utterance mean normalisation.
3. Training: a 5-layer TDNN (context 13 left, 9 right) on the frames' phone states, cross-entropy, `fit`.
4. Decoding: HCLG built by `symnet.decode.make_hclg` (a uniform word loop, each word's phones as 3-state
   left-to-right HMMs with self-loops, optional silence), the network's log posteriors minus log priors, and
   `symnet.decode.decode`; scored with `symnet.decode.compute_wer`.

With `--chain`, also a chain TDNN-F (LF-MMI on chain egs made on the fly, Kaldi's training rules; see
digits_chain.py), decoded on its own HCLG. With `--kaldi-bin DIR`, Kaldi's own programs train the same networks on
the same features and alignments (kaldi_xent.py, and with --chain kaldi_chain.py), decoded by the same decoder and
graphs: a row per toolkit and model.

    python benchmarks/digits_recipe.py --folder /tmp/digits --chain --kaldi-bin /path/to/kaldi-bin/bin

Prints each stage's time and the table of word and sentence error rates.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import digits_chain
from machine import cpu_model

TRAIN_VOICES, TEST_VOICE = ("flite:kal16", "flite:awb", "flite:slt"), "flite:rms"
STATES = 3  # HMM states per phone (pdfs), as the corpus's state labels
FRAME_SHIFT = 0.01


def xconfig(dim: int, pdfs: int) -> str:
    """The network's xconfig (symnet and Kaldi both train it)."""
    lines = [
        f"input dim={dim} name=input",
        "relu-batchnorm-layer name=tdnn1 input=Append(-2,-1,0,1,2) dim=384",
        "relu-batchnorm-layer name=tdnn2 input=Append(-1,0,1) dim=384",
        "relu-batchnorm-layer name=tdnn3 input=Append(-3,0,3) dim=384",
        "relu-batchnorm-layer name=tdnn4 input=Append(-3,0,3) dim=384",
        "relu-batchnorm-layer name=tdnn5 input=Append(-3,0) dim=384",
        f"output-layer name=output dim={pdfs}",
    ]
    return "\n".join(lines) + "\n"


def network(dim: int, pdfs: int) -> object:
    from symnet.kaldi.xconfig import parse_xconfig_network

    return parse_xconfig_network(xconfig(dim, pdfs), seed=0)


def decoding_graph(
    lexicon: dict[str, list[tuple[str, ...]]], words: list[str], phones: tuple[str, ...]
) -> tuple[object, np.ndarray, dict[int, str]]:
    """HCLG from `symnet.decode`'s graph builder: a loop over the words (each costing ln of their number), every
    pronunciation of each word (probability 1, as Kaldi's lexicon.txt), each phone a 3-state left-to-right HMM
    (self-loops 0.5, pdf of state k of the i-th phone 3i + k, as the corpus's state labels), optional silence
    ("pau", probability 0.5) at the start and after each word; the graph, its transition-id -> pdf map and the
    word names by id."""
    from symnet.decode import left_to_right_model, make_hclg, make_lang, word_loop

    ids = {p: n + 1 for n, p in enumerate(phones)}  # in the corpus's order, so the model's pdfs follow it
    entries = [(w, tuple(pron), 1.0) for w in words for pron in lexicon[w]]
    lang = make_lang(entries, optional_silence="pau", phones={"<eps>": 0, **ids})
    model = left_to_right_model(list(ids.values()), STATES, 0.5)
    hclg = make_hclg(lang, word_loop(lang.words, words), model, self_loop_scale=1.0)
    return hclg, model.transition_pdfs(), {i: w for w, i in lang.words.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--folder", required=True)
    p.add_argument("--train", type=int, default=900, help="training utterances (three voices)")
    p.add_argument("--test", type=int, default=150, help="test utterances per test set")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--acoustic-scale", type=float, default=0.3)
    p.add_argument(
        "--kaldi-bin", type=Path, help="Kaldi's programs: also train the network with nnet3-train (kaldi_xent.py)"
    )
    p.add_argument("--chain", action="store_true", help="also train and decode a chain TDNN-F (digits_chain.py)")
    args = p.parse_args()
    import optax

    from symnet import tune_host_memory
    from symnet.components import set_test_mode
    from symnet.datasets import CorpusSet, synthesise_corpus
    from symnet.decode import DecodingGraph, compute_wer, decode
    from symnet.train import fit

    tune_host_memory()
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores")
    started = time.perf_counter()
    sets = [
        CorpusSet("train", TRAIN_VOICES, args.train),
        CorpusSet("seen", TRAIN_VOICES, args.test),
        CorpusSet("unseen", (TEST_VOICE,), args.test, held_out=True),
    ]
    corpus = synthesise_corpus(Path(args.folder) / "corpus", "digits", sets=sets, seed=1, log=None)
    for s in corpus.manifest["sets"]:
        print(f"  {s['name']}: {s['utterances']} utterances ({s['left_out']} left out: phones not their words')")
    print(f"corpus: {time.perf_counter() - started:.0f} s")
    started = time.perf_counter()
    data = {name: corpus.dataset(name) for name in ("train", "seen", "unseen")}
    print(f"features: {time.perf_counter() - started:.0f} s")
    labels = list(data["train"].labels)
    words, phones = sorted(corpus.lexicon), corpus.phones
    pdfs = corpus.num_pdfs
    started = time.perf_counter()
    result = fit(
        network(40, pdfs), (list(data["train"].features), labels), optax.adam(1e-3), epochs=args.epochs, batch_size=64,
        chunk=50, progress=False, seed=0,
    )  # fmt: skip
    train_seconds = time.perf_counter() - started
    for h in result.history:
        print(f"  epoch {h.epoch}: train loss {h.train_loss:.3f}, frame accuracy {h.train_accuracy:.3f}")
    print(f"training: {train_seconds:.0f} s")
    counts = np.bincount(np.concatenate(labels), minlength=pdfs) + 1.0
    log_priors = np.log(counts / counts.sum())
    fst, tid_pdfs, names = decoding_graph(dict(corpus.lexicon), words, phones)
    graph = DecodingGraph.of(fst, tid_pdfs)
    net = set_test_mode(result.network)  # batch-norm with its trained statistics

    def score(
        toolkit: str, outputs_of: Callable[[str], list[np.ndarray]], chain: tuple[Any, dict[int, str]] | None = None
    ) -> None:
        """Decode each test set's log posteriors (minus the log priors) with the one graph and decoder; with
        `chain` (its graph and word names) a chain model's outputs on every third frame, at acoustic scale 1."""
        for name in ("seen", "unseen"):
            started = time.perf_counter()
            outputs = outputs_of(name)
            refs, hyps = {}, {}
            for u, out in zip(corpus.sets[name], outputs):
                if chain is None:
                    best = decode(graph, np.asarray(out) - log_priors, acoustic_scale=args.acoustic_scale, beam=15.0)
                else:
                    best = decode(chain[0], np.asarray(out)[:: digits_chain.SUBSAMPLING], acoustic_scale=1.0, beam=15.0)
                words_of = names if chain is None else chain[1]
                refs[u.id], hyps[u.id] = list(u.words), [words_of[w] for w in best.words]
            seconds = time.perf_counter() - started
            audio = data[name].num_frames * FRAME_SHIFT
            rate = compute_wer(refs, hyps)
            rows.append((toolkit, name, rate, seconds / audio))
            wer, ser = str(rate).splitlines()[:2]
            print(f"{toolkit}, {name}: {wer}; {ser}; real-time factor (network and decoder) {seconds / audio:.3f}")

    rows: list[tuple[str, str, Any, float]] = []
    trained = {"symnet": train_seconds}
    score("symnet", lambda name: net.compute(list(data[name].features)))
    if args.chain:
        chain_net, trained["symnet chain"], history = digits_chain.train(
            corpus, list(data["train"].features), Path(args.folder) / "chain", args.epochs
        )
        for h in history:
            print(f"  chain epoch {h.epoch}: train loss {h.train_loss:.4f}, accuracy {h.train_accuracy:.3f}")
        print(f"chain training: {trained['symnet chain']:.0f} s")
        chain_test = set_test_mode(chain_net)
        chain_graph = digits_chain.decoding_graph(dict(corpus.lexicon), words, phones)
        score("symnet chain", lambda name: chain_test.compute(list(data[name].features)), chain_graph)
    if args.kaldi_bin is not None:
        import kaldi_xent

        folder = Path(args.folder) / "kaldi"
        keys = [u.id for u in corpus.sets["train"]]
        model, trained["Kaldi"], objectives = kaldi_xent.train(
            args.kaldi_bin, folder, xconfig(40, pdfs), dict(zip(keys, data["train"].features)),
            dict(zip(keys, labels)), pdfs=pdfs, context=result.network.context(), epochs=args.epochs,
        )  # fmt: skip
        for epoch, objective in enumerate(objectives):
            print(f"  Kaldi epoch {epoch}: average log-likelihood {objective:.3f}")
        print(f"Kaldi training: {trained['Kaldi']:.0f} s")

        def kaldi_outputs(model: Path, folder: Path) -> Callable[[str], list[np.ndarray]]:
            ids = {name: [u.id for u in corpus.sets[name]] for name in ("seen", "unseen")}
            return lambda name: kaldi_xent.outputs_of(args.kaldi_bin, model, folder, ids[name], data[name].features)

        score("Kaldi", kaldi_outputs(model, folder))
        if args.chain:
            import kaldi_chain

            chain_folder = Path(args.folder) / "kaldi-chain"
            chain_xconfig = digits_chain.xconfig(40, 2 * len(phones))
            chain_model, trained["Kaldi chain"], chain_objectives = kaldi_chain.train(
                args.kaldi_bin, chain_folder, chain_xconfig, dict(zip(keys, data["train"].features)),
                {u.id: corpus.phone_lengths(u) for u in corpus.sets["train"]}, phones=len(phones),
                context=chain_net.context(), epochs=args.epochs, num_frames=digits_chain.NUM_FRAMES,
                xent_regularize=digits_chain.XENT_REGULARIZE, leaky_hmm_coefficient=digits_chain.LEAKY_HMM,
            )  # fmt: skip
            for epoch, objective in enumerate(chain_objectives):
                print(f"  Kaldi chain epoch {epoch}: objective {objective:.4f}")
            print(f"Kaldi chain training: {trained['Kaldi chain']:.0f} s")

            score("Kaldi chain", kaldi_outputs(chain_model, chain_folder), chain_graph)
    print("\n| toolkit | test set | voices | utterances | %WER | %SER | decoding real-time factor | training |")
    print("|---|---|---|---|---|---|---|---|")
    for toolkit, name, rate, rtf in rows:
        voices = ", ".join(TRAIN_VOICES) if name == "seen" else TEST_VOICE
        voices = voices.replace("flite:", "")
        print(
            f"| {toolkit} | {name} | {voices} | {rate.sentences} | {rate.wer:.2f} | {rate.ser:.2f} | {rtf:.3f} "
            f"| {trained[toolkit]:.0f} s |"
        )
    print(f"\ntraining: {len(labels)} utterances, {args.epochs} epochs")


if __name__ == "__main__":
    main()
