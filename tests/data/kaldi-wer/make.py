"""References and hypotheses with every kind of error, scored by Kaldi's `compute-wer` in each mode, for
tests/decode/test_wer.py.

    python tests/data/kaldi-wer/make.py --kaldi-bin /path/to/kaldi-bin/bin

Writes `ref.txt` (40 utterances of 0 to 12 words from a 6-word vocabulary, so that ties between alignments are
common), `hyp.txt` (each reference with random insertions, deletions and substitutions; 5 utterances left
out) and `MODE.txt`, `compute-wer --mode=MODE ark:ref.txt ark:hyp.txt`'s output (strict fails: it is left
out), and `per-utterance.txt`, its first line for each utterance scored alone. The tests read these files only.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
WORDS = ["one", "two", "three", "oh", "five", "nine"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kaldi-bin", required=True)
    bin_ = Path(p.parse_args().kaldi_bin)
    rng = np.random.default_rng(0)
    refs, hyps = [], []
    for i in range(40):
        ref = [WORDS[k] for k in rng.integers(0, len(WORDS), size=int(rng.integers(0, 13)))]
        hyp = list(ref)
        for _ in range(int(rng.integers(0, 5))):
            kind = rng.integers(3)
            at = int(rng.integers(0, len(hyp) + 1))
            if kind == 0:
                hyp.insert(at, WORDS[int(rng.integers(len(WORDS)))])
            elif hyp and at < len(hyp):
                if kind == 1:
                    del hyp[at]
                else:
                    hyp[at] = WORDS[int(rng.integers(len(WORDS)))]
        refs.append(f"utt{i:02d} {' '.join(ref)}".rstrip() + "\n")
        if i % 8 != 3:
            hyps.append(f"utt{i:02d} {' '.join(hyp)}".rstrip() + "\n")
    (HERE / "ref.txt").write_text("".join(refs))
    (HERE / "hyp.txt").write_text("".join(hyps))
    for mode in ("present", "all"):
        command = [str(bin_ / "compute-wer"), f"--mode={mode}", "ark:ref.txt", "ark:hyp.txt"]
        out = subprocess.run(command, cwd=HERE, check=True, capture_output=True, text=True).stdout
        (HERE / f"{mode}.txt").write_text(out)
    lines = []  # each utterance alone: its insertions, deletions and substitutions as Kaldi counts them
    for ref in refs:
        key = ref.split()[0]
        hyp = next((h for h in hyps if h.split()[0] == key), None)
        if hyp is None:
            continue
        command = [str(bin_ / "compute-wer"), "ark:-", f"ark:echo '{hyp.strip()}' |"]
        out = subprocess.run(command, input=ref, check=True, capture_output=True, text=True).stdout
        lines.append(f"{key} {out.splitlines()[0]}\n")
    (HERE / "per-utterance.txt").write_text("".join(lines))


if __name__ == "__main__":
    main()
