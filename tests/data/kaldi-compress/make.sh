#!/bin/bash
# Makes the compressed-matrix fixtures of tests/kaldi/test_compress.py with real Kaldi (5.5.1181):
# bash make.sh [path/to/kaldi-bin] (default /tmp/kaldi/kaldi-bin; ../shared/kaldi-bin.tar.xz). Tests read what it
# keeps and need no Kaldi.
#
# matrices.txt: float32 matrices as a text archive (each value written exactly): speech-like filterbanks, a
# matrix of 9 rows (the fewest Kaldi compresses a byte a value) and of 8 and 1 (two bytes a value), constant
# matrices, columns with ties and a constant column, a wide range. compressed.ark: `copy-feats --compress=true`
# of them (the default method, kAutomaticMethod, as nnet3-get-egs and nnet3-chain-get-egs compress egs).
set -euo pipefail
kaldi=${1:-/tmp/kaldi/kaldi-bin}
here=$(cd "$(dirname "$0")" && pwd)
export PATH="$kaldi/bin:$PATH"
cd "$here"
python3 - <<'PY'
import random
random.seed(5)
def gauss(mean, std):
    return random.gauss(mean, std)
mats = {
    "fbank": [[gauss(10 + 0.2 * c, 2.5) for c in range(40)] for _ in range(50)],
    "nine": [[gauss(0, 1) for _ in range(3)] for _ in range(9)],
    "eight": [[gauss(-1, 3) for _ in range(5)] for _ in range(8)],
    "one": [[gauss(0, 1) for _ in range(4)]],
    "constant": [[3.5, 3.5] for _ in range(12)],
    "negative-constant": [[-2.0] for _ in range(10)],
    "ties": [[float(random.choice((0, 1, 1, 2))), 7.25, gauss(0, 1e-3)] for _ in range(20)],
    "wide": [[gauss(0, 1000), gauss(5, 1e-2)] for _ in range(100)],
    "chunk": [[gauss(0, 1)] for _ in range(61)],
}
import struct
def f32(v):  # the float32 nearest v, written exactly
    return repr(struct.unpack("<f", struct.pack("<f", v))[0])
with open("matrices.txt", "w") as f:
    for key, rows in mats.items():
        f.write(f"{key}  [\n")
        for i, row in enumerate(rows):
            f.write("  " + " ".join(f32(v) for v in row) + (" ]\n" if i == len(rows) - 1 else "\n"))
PY
copy-feats --compress=true ark,t:matrices.txt ark:compressed.ark 2>/dev/null
