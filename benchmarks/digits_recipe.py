"""A connected-digits recognizer on synthetic speech, end to end with symnet: audio, features, alignments, a
TDNN trained with `fit`, a decoding graph, the decoder and the word error rate on a voice never heard in
training.

    apt-get install flite          # the synthesiser (Debian's; its statistical voices are of real speakers)
    python benchmarks/digits_recipe.py --folder /tmp/digits [--train 900] [--epochs 6]

1. Corpus: random digit strings ("oh", "zero" to "nine", 1 to 7 digits) spoken by flite's voices, each with
   its speed and pitch varied and noise added at 10-30 dB SNR, 16 kHz. Training voices: kal16, awb, slt; test:
   new strings by those voices ("seen") and by rms ("unseen": no utterance of rms is in training). Phone
   alignments come from the synthesiser's own segment timings (`flite -psdur`), each phone split into three
   equal HMM states; the lexicon is flite's (the phones it says for each word alone), and an utterance whose
   phones are not its words' is left out (said).
2. Features: 40 Kaldi filterbanks (`symnet.features.fbank`, dither 0) with per-utterance mean normalisation.
3. Training: a 5-layer TDNN (context 13 left, 9 right) on the frames' phone states, cross-entropy, `fit`.
4. Decoding: HCLG built by `symnet.decode.make_hclg` (a uniform word loop, each word's phones as 3-state
   left-to-right HMMs with self-loops, optional silence), the network's log posteriors minus log priors, and
   `symnet.decode.decode`; scored with `symnet.decode.compute_wer`.

Prints each stage's time and the table of word and sentence error rates.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np

from machine import cpu_model

WORDS = ["oh", "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
TRAIN_VOICES, TEST_VOICE = ("kal16", "awb", "slt"), "rms"
STATES = 3  # HMM states per phone (pdfs)
FRAME_SHIFT = 0.01


def say(text: str, voice: str, path: Path, stretch: float, pitch: float) -> list[tuple[str, float]]:
    """Synthesise `text` with flite to `path`; its (phone, end time) segments."""
    out = subprocess.run(
        ["flite", "-voice", voice, "-t", text, "-o", str(path), "-psdur",
         "--setf", f"duration_stretch={stretch:.3f}", "--setf", f"int_f0_target_mean={pitch:.1f}"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return [(p, float(t)) for p, t in (item.rsplit(":", 1) for item in out.split())]


def lexicon() -> dict[str, list[str]]:
    """flite's phones for each word said alone (the same for every voice used here)."""
    out = {}
    for word in WORDS:
        segments = say(word, "slt", Path(os.devnull), 1.0, 170.0)
        out[word] = [p for p, _ in segments if p != "pau"]
    return out


def make_corpus(folder: Path, count: int, voices: tuple[str, ...], seed: int, lex: dict[str, list[str]]) -> list[dict]:
    """Utterances (wav, words, phone segments), cached in `folder`."""
    from symnet.features import read_wav, write_wav

    index = folder / "utterances.json"
    if index.exists():
        return json.loads(index.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    utterances, left_out = [], 0
    for i in range(count):
        voice = voices[i % len(voices)]
        words = [WORDS[k] for k in rng.integers(0, len(WORDS), size=int(rng.integers(1, 8)))]
        stretch, pitch, snr = rng.uniform(0.8, 1.25), rng.uniform(90, 210), rng.uniform(10, 30)
        path = folder / f"{voice}-{i:05d}.wav"
        segments = say(" ".join(words), voice, path, stretch, pitch)
        if [p for p, _ in segments if p != "pau"] != [p for w in words for p in lex[w]]:
            left_out += 1
            path.unlink()
            continue
        wave, rate = read_wav(path)
        noise = rng.standard_normal(len(wave)) * np.sqrt(np.mean(wave**2) / 10 ** (snr / 10))
        write_wav(path, wave + noise, rate)
        utterances.append({"wav": path.name, "voice": voice, "words": words, "segments": segments})
    print(f"  {folder.name}: {len(utterances)} utterances ({left_out} left out: phones not their words')")
    index.write_text(json.dumps(utterances))
    return utterances


def features(folder: Path, utterances: list[dict]) -> list[np.ndarray]:
    from symnet.features import FbankOptions, fbank, read_wav

    options = FbankOptions(num_mel_bins=40, dither=0.0)
    out = []
    for u in utterances:
        wave, _ = read_wav(folder / u["wav"])
        f = fbank(wave, options)
        out.append(f - f.mean(axis=0))
    return out


def state_labels(u: dict, frames: int, phones: list[str]) -> np.ndarray:
    """Each frame's pdf: its phone (by the frame's centre time) and which third of the phone it is in."""
    labels = np.zeros(frames, dtype=np.int32)
    start = 0.0
    for phone, end in u["segments"]:
        a, b = int(round(start / FRAME_SHIFT)), min(int(round(end / FRAME_SHIFT)), frames)
        if b > a:
            part = np.minimum((np.arange(b - a) * STATES) // (b - a), STATES - 1)
            labels[a:b] = phones.index(phone) * STATES + part
        start = end
    labels[int(round(start / FRAME_SHIFT)) :] = phones.index("pau") * STATES + STATES - 1
    return labels


def network(dim: int, pdfs: int) -> object:
    from symnet.kaldi.xconfig import parse_xconfig_network

    lines = [
        f"input dim={dim} name=input",
        "relu-batchnorm-layer name=tdnn1 input=Append(-2,-1,0,1,2) dim=384",
        "relu-batchnorm-layer name=tdnn2 input=Append(-1,0,1) dim=384",
        "relu-batchnorm-layer name=tdnn3 input=Append(-3,0,3) dim=384",
        "relu-batchnorm-layer name=tdnn4 input=Append(-3,0,3) dim=384",
        "relu-batchnorm-layer name=tdnn5 input=Append(-3,0) dim=384",
        f"output-layer name=output dim={pdfs}",
    ]
    return parse_xconfig_network("\n".join(lines), seed=0)


def decoding_graph(lex: dict[str, list[str]], phones: list[str]) -> tuple[object, np.ndarray, dict[int, str]]:
    """HCLG from `symnet.decode`'s graph builder: a loop over the words (each costing ln 11), each phone a 3-state
    left-to-right HMM (self-loops 0.5, pdf of state k of the i-th phone 3i + k, as the training labels), optional
    silence ("pau", probability 0.5) at the start and after each word; the graph, its transition-id -> pdf map
    and the word names by id."""
    from symnet.decode import left_to_right_model, make_hclg, make_lang, word_loop

    ids = {p: n + 1 for n, p in enumerate(phones)}  # sorted, so the model's pdfs follow the phones' order
    lang = make_lang([(w, tuple(lex[w]), 1.0) for w in WORDS], optional_silence="pau", phones={"<eps>": 0, **ids})
    model = left_to_right_model(list(ids.values()), STATES, 0.5)
    hclg = make_hclg(lang, word_loop(lang.words, WORDS), model, self_loop_scale=1.0)
    return hclg, model.transition_pdfs(), {i: w for w, i in lang.words.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--folder", required=True)
    p.add_argument("--train", type=int, default=900, help="training utterances (three voices)")
    p.add_argument("--test", type=int, default=150, help="test utterances per test set")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--acoustic-scale", type=float, default=0.3)
    args = p.parse_args()
    import optax

    from symnet import tune_host_memory
    from symnet.components import set_test_mode
    from symnet.decode import DecodingGraph, compute_wer, decode
    from symnet.train import fit

    tune_host_memory()
    folder = Path(args.folder)
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores")
    started = time.perf_counter()
    lex = lexicon()
    phones = sorted({p for pron in lex.values() for p in pron} | {"pau"})
    sets = {
        "train": make_corpus(folder / "train", args.train, TRAIN_VOICES, 1, lex),
        "seen": make_corpus(folder / "seen", args.test, TRAIN_VOICES, 2, lex),
        "unseen": make_corpus(folder / "unseen", args.test, (TEST_VOICE,), 3, lex),
    }
    print(f"corpus: {time.perf_counter() - started:.0f} s")
    started = time.perf_counter()
    feats = {name: features(folder / name, utts) for name, utts in sets.items()}
    print(f"features: {time.perf_counter() - started:.0f} s")
    labels = [state_labels(u, len(f), phones) for u, f in zip(sets["train"], feats["train"])]
    pdfs = len(phones) * STATES
    started = time.perf_counter()
    result = fit(
        network(40, pdfs), (feats["train"], labels), optax.adam(1e-3), epochs=args.epochs, batch_size=64,
        chunk=50, progress=False, seed=0,
    )  # fmt: skip
    train_seconds = time.perf_counter() - started
    for h in result.history:
        print(f"  epoch {h.epoch}: train loss {h.train_loss:.3f}, frame accuracy {h.train_accuracy:.3f}")
    print(f"training: {train_seconds:.0f} s")
    counts = np.bincount(np.concatenate(labels), minlength=pdfs) + 1.0
    log_priors = np.log(counts / counts.sum())
    fst, tid_pdfs, names = decoding_graph(lex, phones)
    graph = DecodingGraph.of(fst, tid_pdfs)
    net = set_test_mode(result.network)  # batch-norm with its trained statistics
    rows = []
    for name in ("seen", "unseen"):
        started = time.perf_counter()
        outputs = net.compute(feats[name])
        refs, hyps = {}, {}
        for i, (u, out) in enumerate(zip(sets[name], outputs)):
            best = decode(graph, np.asarray(out) - log_priors, acoustic_scale=args.acoustic_scale, beam=15.0)
            refs[str(i)], hyps[str(i)] = u["words"], [names[w] for w in best.words]
        seconds = time.perf_counter() - started
        audio = sum(len(f) for f in feats[name]) * FRAME_SHIFT
        rate = compute_wer(refs, hyps)
        rows.append((name, rate, seconds / audio))
        wer, ser = str(rate).splitlines()[:2]
        print(f"{name}: {wer}; {ser}; real-time factor {seconds / audio:.3f}")
    print("\n| test set | voices | utterances | %WER | %SER | decoding real-time factor |")
    print("|---|---|---|---|---|---|")
    for name, rate, rtf in rows:
        voices = ", ".join(TRAIN_VOICES) if name == "seen" else TEST_VOICE
        print(f"| {name} | {voices} | {rate.sentences} | {rate.wer:.2f} | {rate.ser:.2f} | {rtf:.3f} |")
    print(f"\ntraining: {len(sets['train'])} utterances, {args.epochs} epochs, {train_seconds:.0f} s")


if __name__ == "__main__":
    main()
