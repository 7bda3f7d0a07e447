"""A recognizer of digit strings or spoken commands on synthetic speech, end to end with symnet: audio, features,
alignments, networks trained with `fit`, decoding graphs, the decoder and the word error rate on a voice never
heard in training.

    apt-get install flite          # the synthesiser (Debian's; its statistical voices are of real speakers)
    python benchmarks/digits_recipe.py --folder /tmp/digits [--task digits|commands] [--train 900] [--epochs 6]

1. Corpus: `symnet.datasets.synthesise_corpus`'s digit strings ("oh", "zero" to "nine", 1 to 7 digits) or
   commands ("turn off the kitchen lights"), each utterance with its speed and pitch varied and noise added at
   10-30 dB SNR, 16 kHz. `--voices flite` (the default): training voices flite's kal16, awb, slt; test: new
   utterances by those voices ("seen") and by rms ("unseen": no utterance of rms is in training). `--voices
   many` (also needs `apt-get install espeak-ng`): the corpus's default voices, 39 in training (flite's and
   espeak-ng's accents times variants) and 13 held out (rms, and espeak-ng accents and variants none of which is
   heard in training), so the unseen word error rate is not one speaker's. Phone alignments come from the
   synthesisers' own segment timings (`flite -psdur`, espeak-ng's phoneme events), each phone's frames split into
   three equal HMM states; the lexicon is the synthesisers' (their phones for each word said alone, and the
   variants the utterances say: docs/corpus.md). The corpus is cached in FOLDER/corpus.
2. Features: 40 Kaldi filterbanks (`symnet.features.fbank`, dither 0) with per-utterance mean normalisation.
3. Training: a 5-layer TDNN (context 13 left, 9 right) on the frames' phone states, cross-entropy, `fit`.
4. Decoding: HCLG built by `symnet.decode.make_hclg` (the task's grammar: a uniform loop over the digits, or a
   trigram of the training sentences; each word's phones as 3-state left-to-right HMMs with self-loops,
   optional silence), the network's log posteriors minus log priors, and `symnet.decode.decode`; scored with
   `symnet.decode.compute_wer`.

With `--chain`, also a chain TDNN-F (LF-MMI on chain egs made on the fly, Kaldi's training rules; see
digits_chain.py), decoded on its own HCLG; with `--ctc`, a TDNN-BLSTM trained with CTC (digits_ctc.py), decoded
on TLG. With `--kaldi-bin DIR`, Kaldi's own programs train the TDNN and chain networks on the same features and
alignments (kaldi_xent.py, and with --chain kaldi_chain.py), decoded by the same decoder and graphs: a row per
toolkit and model.

    python benchmarks/digits_recipe.py --folder /tmp/digits --chain --ctc --kaldi-bin /path/to/kaldi-bin/bin

With `--compile-cache DIR`, compiled steps are kept in DIR (`symnet.engine.enable_compile_cache`), so a rerun of
the same recipe compiles nothing (`make recipe` keeps them in RECIPE_DIR/xla-cache).

Prints each stage's time and the table of word and sentence error rates, and writes the table and its plot
(results_plot.py) to FOLDER/results-TASK.md and .png.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

import digits_chain
import digits_ctc
import results_plot
from machine import cpu_model
from recipe_lang import recipe_lang

#: The recipe's voice sets, training and held out: "flite" is flite's kal16, awb and slt, and rms held out (one
#: unseen speaker); "many" is the corpus's defaults (symnet.datasets.TRAIN_VOICES and TEST_VOICES: flite's and
#: espeak-ng's, 39 training voices and 13 held out, no held-out accent or variant heard in training).
VOICE_SETS = {"flite": (("flite:kal16", "flite:awb", "flite:slt"), ("flite:rms",)), "many": None}
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


class Row(NamedTuple):
    """One model on one test set: its system name, test set ("seen" or "unseen"), `compute_wer`'s ErrorRate, the
    decoding real-time factor and the training wall seconds."""

    system: str
    test_set: str
    rate: Any
    real_time_factor: float
    training_seconds: float


def voices_cell(voices: tuple[str, ...]) -> str:
    """A test set's voices as the table names them: each voice where there are a few, else how many of each
    synthesiser's."""
    if len(voices) <= 4:
        return ", ".join(v.removeprefix("flite:") for v in voices)
    counts = {synth: sum(v.startswith(f"{synth}:") for v in voices) for synth in ("flite", "espeak")}
    return f"{len(voices)} voices ({counts['flite']} flite, {counts['espeak']} espeak-ng)"


def voice_sets(name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The training and held-out voices of `--voices NAME`."""
    from symnet.datasets import TEST_VOICES, TRAIN_VOICES

    return VOICE_SETS[name] or (tuple(TRAIN_VOICES), tuple(TEST_VOICES))


def recipe_corpus(folder: Path, task: str, voices: str, train: int, test: int) -> Any:
    """The recipe's corpus in FOLDER/corpus (synthesised once): `train` utterances of the training voices of
    `--voices VOICES`, and `test` each of them ("seen") and of the held-out voices ("unseen")."""
    from symnet.datasets import CorpusSet, synthesise_corpus

    heard, held_out = voice_sets(voices)
    sets = [
        CorpusSet("train", heard, train),
        CorpusSet("seen", heard, test),
        CorpusSet("unseen", held_out, test, held_out=True),
    ]
    return synthesise_corpus(folder / "corpus", task, sets=sets, seed=1, log=None)


def word_errors(
    utterances: Sequence[Any], outputs: Iterable[np.ndarray], graph: tuple[Any, dict[int, str]], *,
    every: int = 1, scale: float = 1.0, priors: np.ndarray | None = None,
) -> Any:  # fmt: skip
    """`compute_wer` of `utterances` decoded from their network `outputs` (every `every`-th frame, minus `priors`
    if given) on `graph` (the HCLG and the word names by id) at acoustic scale `scale`, beam 15."""
    from symnet.decode import compute_wer, decode

    refs, hyps = {}, {}
    for u, out in zip(utterances, outputs, strict=True):
        loglikes = np.asarray(out)[::every] - (0.0 if priors is None else priors)
        best = decode(graph[0], loglikes, acoustic_scale=scale, beam=15.0)
        refs[u.id], hyps[u.id] = list(u.words), [graph[1][w] for w in best.words]
    return compute_wer(refs, hyps)


def results_table(rows: list[Row], task: str, voices: tuple[tuple[str, ...], tuple[str, ...]]) -> str:
    """The results as a Markdown table: a row per model and test set; `voices` the training and held-out ones."""
    lines = [
        f"| toolkit, model ({task}) | test set | voices | utterances | %WER | %SER | decoding real-time factor "
        "| training |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        rate, heard = row.rate, voices_cell(voices[row.test_set != "seen"])
        lines.append(
            f"| {row.system} | {row.test_set} | {heard} | {rate.sentences} | {rate.wer:.2f} | {rate.ser:.2f} "
            f"| {row.real_time_factor:.3f} | {row.training_seconds:.0f} s |"
        )
    return "\n".join(lines) + "\n"


def network(dim: int, pdfs: int, seed: int = 0) -> object:
    from symnet.kaldi.xconfig import parse_xconfig_network

    return parse_xconfig_network(xconfig(dim, pdfs), seed=seed)


def grammar(task: str, words: list[str], sentences: list[list[str]]) -> Callable[[Any], Any]:
    """G for a lang's word ids: for digits a loop over the words (each costing ln of their number), for the
    commands a trigram of the training sentences (`estimate_arpa`: Witten-Bell, as SRILM's `-wbdiscount
    -interpolate`; backoff arcs read #0, as arpa2fst makes G)."""
    from symnet.decode import arpa_to_fst, estimate_arpa, word_loop

    if task == "digits":
        return lambda lang: word_loop(lang.words, words)
    lm = estimate_arpa(sentences, order=3, vocabulary=words)
    return lambda lang: arpa_to_fst(lm, lang.words)


def decoding_graph(
    lexicon: dict[str, list[tuple[str, ...]]], words: list[str], phones: tuple[str, ...], grammar: Any
) -> tuple[Any, dict[int, str]]:
    """HCLG from `symnet.decode`'s graph builder: `grammar(lang)`, every pronunciation of each word
    (probability 1, as Kaldi's lexicon.txt), each phone a 3-state left-to-right HMM (self-loops 0.5, pdf of
    state k of the i-th phone 3i + k, as the corpus's state labels), optional silence ("pau", probability 0.5)
    at the start and after each word; the `DecodingGraph` and the word names by id."""
    from symnet.decode import DecodingGraph, left_to_right_model, make_hclg

    lang = recipe_lang(lexicon, words, phones)
    model = left_to_right_model(list(range(1, len(phones) + 1)), STATES, 0.5)
    hclg = make_hclg(lang, grammar(lang), model, self_loop_scale=1.0)
    return DecodingGraph.of(hclg, model.transition_pdfs()), {i: w for w, i in lang.words.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--folder", required=True)
    p.add_argument("--task", choices=("digits", "commands"), default="digits")
    p.add_argument(
        "--voices", choices=tuple(VOICE_SETS), default="flite",
        help="flite: 3 training voices, rms held out; many: 39 training and 13 held-out voices (needs espeak-ng)",
    )  # fmt: skip
    p.add_argument("--train", type=int, default=900, help="training utterances (over the training voices)")
    p.add_argument("--test", type=int, default=150, help="test utterances per test set")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--acoustic-scale", type=float, default=0.3)
    p.add_argument(
        "--seed", type=int, default=0,
        help="both toolkits' initial parameters and example order (symnet's egs chunks too): seeds show the spread",
    )  # fmt: skip
    p.add_argument(
        "--kaldi-bin", type=Path, help="Kaldi's programs: also train the network with nnet3-train (kaldi_xent.py)"
    )
    p.add_argument("--chain", action="store_true", help="also train and decode a chain TDNN-F (digits_chain.py)")
    p.add_argument("--ctc", action="store_true", help="also train and decode a TDNN-BLSTM with CTC (digits_ctc.py)")
    p.add_argument(
        "--compile-cache", metavar="DIR",
        help="keep compiled steps in DIR (symnet.engine.enable_compile_cache): a rerun of the same recipe loads them",
    )  # fmt: skip
    args = p.parse_args()
    import optax

    from symnet import tune_host_memory
    from symnet.components import set_test_mode
    from symnet.train import fit

    tune_host_memory()
    if args.compile_cache:
        from symnet.engine import enable_compile_cache

        enable_compile_cache(args.compile_cache)
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores")
    started = time.perf_counter()
    voices = voice_sets(args.voices)
    corpus = recipe_corpus(Path(args.folder), args.task, args.voices, args.train, args.test)
    for s in corpus.manifest["sets"]:
        print(f"  {s['name']}: {s['utterances']} utterances ({s['left_out']} left out: phones not their words')")
    print(f"corpus ({args.task}): {time.perf_counter() - started:.0f} s")
    started = time.perf_counter()
    data = {name: corpus.dataset(name) for name in ("train", "seen", "unseen")}
    print(f"features: {time.perf_counter() - started:.0f} s")
    labels = list(data["train"].labels)
    words, phones = sorted(corpus.lexicon), corpus.phones
    lexicon = dict(corpus.lexicon)
    task_grammar = grammar(args.task, words, [list(u.words) for u in corpus.sets["train"]])
    pdfs = corpus.num_pdfs
    started = time.perf_counter()
    result = fit(
        network(40, pdfs, args.seed), (list(data["train"].features), labels), optax.adam(1e-3), epochs=args.epochs,
        batch_size=64, chunk=50, progress=False, seed=args.seed,
    )  # fmt: skip
    train_seconds = time.perf_counter() - started
    for h in result.history:
        print(f"  epoch {h.epoch}: train loss {h.train_loss:.3f}, frame accuracy {h.train_accuracy:.3f}")
    print(f"training: {train_seconds:.0f} s")
    counts = np.bincount(np.concatenate(labels), minlength=pdfs) + 1.0
    log_priors = np.log(counts / counts.sum())
    xent_graph = decoding_graph(lexicon, words, phones, task_grammar)
    net = set_test_mode(result.network)  # batch-norm with its trained statistics
    rows: list[Row] = []

    def score(
        toolkit: str, outputs_of: Callable[[str], list[np.ndarray]], graph: tuple[Any, dict[int, str]], *,
        every: int = 1, scale: float = 1.0, priors: np.ndarray | None = None,
    ) -> None:  # fmt: skip
        """Decode each test set's outputs (every `every`-th frame, minus `priors` if given) on `graph` at acoustic
        scale `scale` and score them."""
        for name in ("seen", "unseen"):
            started = time.perf_counter()
            rate = word_errors(corpus.sets[name], outputs_of(name), graph, every=every, scale=scale, priors=priors)
            seconds = time.perf_counter() - started
            audio = data[name].num_frames * FRAME_SHIFT
            rows.append(Row(toolkit, name, rate, seconds / audio, trained[toolkit]))
            wer, ser = str(rate).splitlines()[:2]
            print(f"{toolkit}, {name}: {wer}; {ser}; real-time factor (network and decoder) {seconds / audio:.3f}")

    trained = {"symnet": train_seconds}
    xent_scoring = {"scale": args.acoustic_scale, "priors": log_priors}
    score("symnet", lambda name: net.compute(list(data[name].features)), xent_graph, **xent_scoring)
    if args.chain:
        chain_net, trained["symnet chain"], history = digits_chain.train(
            corpus, list(data["train"].features), Path(args.folder) / "chain", args.epochs, args.seed
        )
        for h in history:
            print(f"  chain epoch {h.epoch}: train loss {h.train_loss:.4f}, accuracy {h.train_accuracy:.3f}")
        print(f"chain training: {trained['symnet chain']:.0f} s")
        chain_test = set_test_mode(chain_net)
        chain_graph = digits_chain.decoding_graph(lexicon, words, phones, task_grammar)
        score(
            "symnet chain", lambda name: chain_test.compute(list(data[name].features)), chain_graph,
            every=digits_chain.SUBSAMPLING,
        )  # fmt: skip
    if args.ctc:
        ctc_net, trained["symnet CTC"], history = digits_ctc.train(
            corpus, list(data["train"].features), args.epochs, args.seed
        )
        for h in history:
            print(f"  CTC epoch {h.epoch}: train loss {h.train_loss:.4f}, token accuracy {h.train_accuracy:.3f}")
        print(f"CTC training: {trained['symnet CTC']:.0f} s")
        ctc_graph = digits_ctc.decoding_graph(lexicon, words, phones, task_grammar)
        every = digits_ctc.SUBSAMPLING
        score("symnet CTC", lambda name: ctc_net.compute(list(data[name].features)), ctc_graph, every=every)
    if args.kaldi_bin is not None:
        import kaldi_xent

        folder = Path(args.folder) / "kaldi"
        keys = [u.id for u in corpus.sets["train"]]
        model, trained["Kaldi"], objectives = kaldi_xent.train(
            args.kaldi_bin, folder, xconfig(40, pdfs), dict(zip(keys, data["train"].features)),
            dict(zip(keys, labels)), pdfs=pdfs, context=result.network.context(), epochs=args.epochs, seed=args.seed,
        )  # fmt: skip
        for epoch, objective in enumerate(objectives):
            print(f"  Kaldi epoch {epoch}: average log-likelihood {objective:.3f}")
        print(f"Kaldi training: {trained['Kaldi']:.0f} s")

        def kaldi_outputs(model: Path, folder: Path) -> Callable[[str], list[np.ndarray]]:
            ids = {name: [u.id for u in corpus.sets[name]] for name in ("seen", "unseen")}
            return lambda name: kaldi_xent.outputs_of(args.kaldi_bin, model, folder, ids[name], data[name].features)

        score("Kaldi", kaldi_outputs(model, folder), xent_graph, **xent_scoring)
        if args.chain:
            import kaldi_chain

            chain_folder = Path(args.folder) / "kaldi-chain"
            chain_xconfig = digits_chain.xconfig(40, 2 * len(phones))
            chain_model, trained["Kaldi chain"], chain_objectives = kaldi_chain.train(
                args.kaldi_bin, chain_folder, chain_xconfig, dict(zip(keys, data["train"].features)),
                {u.id: corpus.phone_lengths(u) for u in corpus.sets["train"]}, phones=len(phones),
                context=chain_net.context(), epochs=args.epochs, num_frames=digits_chain.NUM_FRAMES,
                xent_regularize=digits_chain.XENT_REGULARIZE, leaky_hmm_coefficient=digits_chain.LEAKY_HMM,
                seed=args.seed,
            )  # fmt: skip
            for epoch, objective in enumerate(chain_objectives):
                print(f"  Kaldi chain epoch {epoch}: objective {objective:.4f}")
            print(f"Kaldi chain training: {trained['Kaldi chain']:.0f} s")

            score("Kaldi chain", kaldi_outputs(chain_model, chain_folder), chain_graph, every=digits_chain.SUBSAMPLING)
            # symnet's trainer on Kaldi's egs and den.fst: which of the two differs, the egs or the training
            same = "symnet chain, Kaldi's egs"
            same_egs, trained[same], history = digits_chain.train_on_kaldi_egs(chain_folder, args.epochs, args.seed)
            for h in history:
                print(f"  chain on Kaldi's egs, epoch {h.epoch}: train loss {h.train_loss:.4f}")
            print(f"chain training on Kaldi's egs: {trained[same]:.0f} s")
            same_egs_test = set_test_mode(same_egs)
            score(
                same, lambda name: same_egs_test.compute(list(data[name].features)),
                chain_graph, every=digits_chain.SUBSAMPLING,
            )  # fmt: skip
    table = results_table(rows, args.task, voices)
    print("\n" + table)
    print(f"training: {len(labels)} utterances, {args.epochs} epochs, seed {args.seed}, voices {args.voices}")
    written = Path(args.folder) / f"results-{args.task}{f'-seed{args.seed}' if args.seed else ''}.md"
    written.write_text(table)
    title = f"{args.task}: %WER against training time, {cpu_model()}, {os.cpu_count()} cores"
    results_plot.plot(results_plot.read_table(table), written.with_suffix(".png"), title)
    print(f"table and plot: {written}, {written.with_suffix('.png')}")


if __name__ == "__main__":
    main()
