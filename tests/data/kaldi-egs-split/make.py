"""Egs cut by Kaldi's `nnet3-get-egs` from a few utterances, for tests/train/test_egs_split.py.

    python tests/data/kaldi-egs-split/make.py --kaldi-bin /path/to/kaldi-bin/bin

Writes features (`feats.ark`, 4-dim, utterances of 2 to 60 frames) and pdf alignments (`ali.ark`, 10 pdfs),
then for each case of `CASES` runs `nnet3-get-egs --compress=false --verbose=3` three times and keeps the egs
(`NAME.RUN.egs`: Kaldi spreads gaps with `std::random_device`, so runs differ) and the
utterance-length-to-splits map it logs (`NAME.splits`). The tests read these files only; Kaldi is needed only
to remake them.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import kaldiio
import numpy as np

HERE = Path(__file__).resolve().parent
LENGTHS = (2, 5, 6, 7, 8, 9, 11, 13, 14, 17, 19, 20, 23, 27, 31, 40, 47, 60)

#: name -> nnet3-get-egs options
CASES = {
    "one-size": ["--num-frames=8", "--left-context=3", "--right-context=2"],
    "three-sizes": ["--num-frames=8,6,5", "--left-context=2", "--right-context=4"],
    "overlap": ["--num-frames=10,7", "--num-frames-overlap=2", "--left-context=1", "--right-context=1"],
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kaldi-bin", required=True)
    bin_ = Path(p.parse_args().kaldi_bin)
    rng = np.random.default_rng(0)
    feats = {f"utt{i:02d}": rng.standard_normal((n, 4)).astype(np.float32) for i, n in enumerate(LENGTHS)}
    ali = {key: rng.integers(0, 10, size=len(f)).astype(np.int32) for key, f in feats.items()}
    kaldiio.save_ark(str(HERE / "feats.ark"), feats)
    kaldiio.save_ark(str(HERE / "ali.ark"), ali)
    for name, options in CASES.items():
        for seed in (1, 2, 3):
            command = [
                str(bin_ / "nnet3-get-egs"), "--num-pdfs=10", "--compress=false", "--verbose=3",
                *options, "ark:feats.ark", f"ark:{bin_ / 'ali-to-post'} ark:ali.ark ark:- |", f"ark:{name}.{seed}.egs",
            ]  # fmt: skip
            log = subprocess.run(command, cwd=HERE, check=True, capture_output=True, text=True).stderr
            found = re.search(r"Utterance-length-to-splits map is: (.*)", log)
            assert found, log
            (HERE / f"{name}.splits").write_text(found.group(1).strip() + "\n")


if __name__ == "__main__":
    main()
