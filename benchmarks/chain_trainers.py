"""Both chain trainers on the same egs, run after run: is one toolkit's word error rate on unseen voices lower, or
is the difference one run's noise?

    python benchmarks/chain_trainers.py --folder DIR --kaldi-bin BIN [--runs 6] [--test 1000] [--compile-cache C]
        [--trainers symnet,Kaldi,symnet-own]

DIR is a folder of `digits_recipe.py --chain --kaldi-bin BIN` (its corpus and DIR/kaldi-chain: the egs Kaldi's
nnet3-chain-get-egs made, den.fst, the network's xconfig and config). Each run `r` (seeds `--first-seed` on)
trains the chain TDNN-F twice on those egs, from initial parameters and in a minibatch order drawn from its seed:

- symnet: `digits_chain.train_on_kaldi_egs` (`fit` with Kaldi's rules and the recipe's schedule);
- Kaldi: nnet3-init `--srand` of the seed, then the recipe's nnet3-chain-train jobs (`kaldi_chain.train_on_egs`);
- with `--trainers` naming it, "symnet-own": symnet's whole pipeline as the recipe's "symnet chain" row runs it
  (`digits_chain.train`: its own phone LM, den graph and egs, cut on the fly from the seed).

Both are decoded on `--test` new utterances of the held-out voices (synthesised once, into DIR/corpus-test, with
another corpus seed than the recipe's test sets) on the recipe's chain HCLG, Kaldi's model computed by
nnet3-compute. A run's word error rate moves by most of a point from seed to seed on the recipe's 150 test
utterances (docs/decoding.md); a larger test set and several runs give each toolkit's mean and spread, and the
difference of the means in standard errors (Welch's). Prints a line per run, then the summary with the CPU model;
training times are wall seconds of training alone (the egs were made beforehand, by Kaldi).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import digits_chain
import digits_recipe
import kaldi_chain
import kaldi_xent
from machine import header

#: The trainers a run can train (see the module doc).
TRAINERS = ("symnet", "Kaldi", "symnet-own")


def welch(a: list[float], b: list[float]) -> tuple[float, float]:
    """The difference of the means of `a` and `b` and its standard error (unequal variances)."""
    error = (statistics.variance(a) / len(a) + statistics.variance(b) / len(b)) ** 0.5
    return statistics.mean(a) - statistics.mean(b), error


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--folder", type=Path, required=True, help="a digits_recipe.py --chain --kaldi-bin folder")
    p.add_argument("--kaldi-bin", type=Path, required=True)
    p.add_argument("--task", choices=("digits", "commands"), default="digits")
    p.add_argument("--voices", choices=tuple(digits_recipe.VOICE_SETS), default="many")
    p.add_argument("--train", type=int, default=900, help="the recipe run's --train")
    p.add_argument("--recipe-test", type=int, default=150, help="the recipe run's --test")
    p.add_argument("--test", type=int, default=1000, help="new utterances of the held-out voices to score")
    p.add_argument("--runs", type=int, default=6)
    p.add_argument("--first-seed", type=int, default=100)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--compile-cache", metavar="DIR", help="symnet.engine.enable_compile_cache(DIR)")
    p.add_argument("--trainers", default="symnet,Kaldi", help=f"which of {','.join(TRAINERS)} to run")
    args = p.parse_args()
    trainers = args.trainers.split(",")
    if not trainers or set(trainers) - set(TRAINERS):
        p.error(f"--trainers: a comma-separated list of {', '.join(TRAINERS)}, got {args.trainers!r}")
    from symnet import tune_host_memory
    from symnet.components import set_test_mode
    from symnet.datasets import CorpusSet, synthesise_corpus

    tune_host_memory()
    if args.compile_cache:
        from symnet.engine import enable_compile_cache

        enable_compile_cache(args.compile_cache)
    print(header(), flush=True)
    egs = args.folder / "kaldi-chain"
    needed = ("cegs.ark", "den.fst", "network.xconfig", "final.config") if trainers != ["symnet-own"] else ()
    missing = [name for name in needed if not (egs / name).exists()]
    if missing:
        raise SystemExit(f"{egs} lacks {', '.join(missing)}: run digits_recipe.py --chain --kaldi-bin there first")
    corpus = digits_recipe.recipe_corpus(args.folder, args.task, args.voices, args.train, args.recipe_test)
    held_out = digits_recipe.voice_sets(args.voices)[1]
    test_sets = [CorpusSet("unseen", held_out, args.test, held_out=True)]
    test = synthesise_corpus(args.folder / "corpus-test", args.task, sets=test_sets, seed=2, log=None)
    utterances, features = test.sets["unseen"], list(test.dataset("unseen").features)
    words, phones = sorted(corpus.lexicon), corpus.phones
    task_grammar = digits_recipe.grammar(args.task, words, [list(u.words) for u in corpus.sets["train"]])
    graph = digits_chain.decoding_graph(dict(corpus.lexicon), words, phones, task_grammar)
    scored = f"{len(utterances)} utterances ({sum(len(u.words) for u in utterances)} words) of {len(held_out)} voices"
    print(f"test set: {scored}", flush=True)

    def errors(outputs: Any) -> Any:
        return digits_recipe.word_errors(utterances, outputs, graph, every=digits_chain.SUBSAMPLING)

    def kaldi_run(seed: int) -> tuple[Any, float]:
        run = egs / "runs" / f"seed-{seed}"
        run.mkdir(parents=True, exist_ok=True)
        kaldi_xent.shell(f"nnet3-init --srand={seed} {(egs / 'final.config').resolve()} 0.raw", run, args.kaldi_bin)
        started = time.perf_counter()
        kaldi_chain.train_on_egs(
            args.kaldi_bin, run, args.epochs, egs=egs / "cegs.ark", den=egs / "den.fst", seed=seed,
            xent_regularize=digits_chain.XENT_REGULARIZE, leaky_hmm_coefficient=digits_chain.LEAKY_HMM,
        )  # fmt: skip
        took = time.perf_counter() - started
        ids = [u.id for u in utterances]
        return errors(kaldi_xent.outputs_of(args.kaldi_bin, run / f"{args.epochs}.raw", run, ids, features)), took

    train = list(corpus.dataset("train").features) if "symnet-own" in trainers else []

    def symnet_run(seed: int, own: bool) -> tuple[Any, float]:
        if own:
            network, took, _ = digits_chain.train(corpus, train, args.folder / "chain-runs", args.epochs, seed)
        else:
            network, took, _ = digits_chain.train_on_kaldi_egs(egs, args.epochs, seed)
        return errors(set_test_mode(network).compute(features)), took

    runs = {"symnet": lambda s: symnet_run(s, False), "Kaldi": kaldi_run, "symnet-own": lambda s: symnet_run(s, True)}
    results: dict[str, list[float]] = {name: [] for name in trainers}
    seconds: dict[str, list[float]] = {name: [] for name in trainers}
    for seed in range(args.first_seed, args.first_seed + args.runs):
        for name in trainers:
            rate, took = runs[name](seed)
            results[name].append(rate.wer)
            seconds[name].append(took)
            print(f"seed {seed}, {name}: {str(rate).splitlines()[0]}; training {took:.0f} s", flush=True)
    print(f"\n{args.runs} runs each of {', '.join(trainers)}, {args.epochs} epochs (egs: {egs}); scored on {scored}")
    print("| trainer | %WER mean | standard deviation | range | training (median) |\n|---|---|---|---|---|")
    for name, rates in results.items():
        spread = statistics.stdev(rates) if len(rates) > 1 else float("nan")
        print(
            f"| {name} | {statistics.mean(rates):.2f} | {spread:.2f} | {min(rates):.2f}-{max(rates):.2f} "
            f"| {statistics.median(seconds[name]):.0f} s |"
        )
    if args.runs > 1 and "Kaldi" in trainers:
        for name in (n for n in trainers if n != "Kaldi"):
            difference, error = welch(results[name], results["Kaldi"])
            within = f"standard error {error:.2f} ({difference / error:+.1f})"
            print(f"{name} minus Kaldi: {difference:+.2f} points, {within}")


if __name__ == "__main__":
    main()
