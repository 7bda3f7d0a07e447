"""The inputs of the LDA fixtures (run by make_fixtures.sh; deterministic: numpy's seeded generator).

Six utterances of 5-dim features (lengths multiples of 8, the egs' --num-frames, so that
nnet3-get-egs covers every frame once with weight 1), drawn from 24 classes (pdfs) whose
segments last 2-6 frames; per-utterance 3-dim i-vectors (also as online i-vectors every 10
frames, every row the same, so that the row nnet3-get-egs picks at random does not matter);
the pdf alignment (binary int32 vectors, and text) and two posterior tables: the alignment as
ali-to-post writes it, and soft posteriors (2-3 entries a frame, pdfs not sorted, a pdf
repeated, as Kaldi's posteriors may be).
"""

import struct
import sys

import numpy as np

out = sys.argv[1] if len(sys.argv) > 1 else "."
rng = np.random.default_rng(20250725)
num_pdfs, dim, ivector_dim, period = 24, 5, 3, 10
lengths = [56, 64, 48, 72, 80, 64]
means = rng.normal(0.0, 1.0, (num_pdfs, dim))
mix = rng.normal(0.0, 1.0, (dim, dim)) * np.array([0.04, 0.08, 0.15, 0.3, 0.5])  # within-class: very unequal scales


def write_matrix(f, key, m):
    m = np.asarray(m, dtype="<f4")
    f.write(key.encode() + b" \0BFM " + struct.pack("<bibi", 4, m.shape[0], 4, m.shape[1]) + m.tobytes())


def write_vector(f, key, v):
    v = np.asarray(v, dtype="<f4")
    f.write(key.encode() + b" \0BFV " + struct.pack("<bi", 4, v.shape[0]) + v.tobytes())


def write_ints(f, key, v):
    f.write(key.encode() + b" \0B" + struct.pack("<bi", 4, len(v)) + b"".join(struct.pack("<bi", 4, int(x)) for x in v))


def write_posterior(f, key, post):
    f.write(key.encode() + b" \0B" + struct.pack("<bi", 4, len(post)))
    for frame in post:
        f.write(struct.pack("<bi", 4, len(frame)))
        for pdf, weight in frame:
            f.write(struct.pack("<bibf", 4, pdf, 4, weight))


feats, ivecs, alis, soft = {}, {}, {}, {}
for i, length in enumerate(lengths):
    utt = f"utt{i + 1}"
    ali: list[int] = []
    while len(ali) < length:
        ali += [int(rng.integers(num_pdfs))] * int(rng.integers(2, 7))
    ali = ali[:length]
    feats[utt] = means[ali] + rng.normal(0.0, 1.0, (length, dim)) @ mix + 0.3 * i
    ivecs[utt] = rng.normal(0.0, 1.0, ivector_dim)
    alis[utt] = ali
    post = []
    for pdf in ali:
        other = int(rng.integers(num_pdfs))
        w = float(np.round(rng.uniform(0.55, 0.95), 2))
        frame = [(other, round(1.0 - w, 2)), (pdf, w)]
        if rng.uniform() < 0.2:  # the frame's pdf twice: SparseVector merges them
            frame = [(pdf, round(w / 2, 3)), (other, round(1.0 - w, 2)), (pdf, round(w - round(w / 2, 3), 3))]
        post.append(frame)
    soft[utt] = post

with open(f"{out}/feats.ark", "wb") as f:
    for utt, m in feats.items():
        write_matrix(f, utt, m)
with open(f"{out}/ivectors.ark", "wb") as f:
    for utt, v in ivecs.items():
        write_vector(f, utt, v)
with open(f"{out}/online_ivectors.ark", "wb") as f:
    for utt, v in ivecs.items():
        write_matrix(f, utt, np.tile(v, (-(-len(feats[utt]) // period), 1)))
with open(f"{out}/ali.ark", "wb") as f:
    for utt, ali in alis.items():
        write_ints(f, utt, ali)
with open(f"{out}/ali.txt", "w") as f:
    for utt, ali in alis.items():
        f.write(f"{utt} {' '.join(map(str, ali))}\n")
with open(f"{out}/ali_post.txt", "w") as f:  # what ali-to-post writes
    for utt, ali in alis.items():
        f.write(f"{utt} {''.join(f'[ {p} 1 ] ' for p in ali)}\n")
with open(f"{out}/post.txt", "w") as f:
    for utt, post in soft.items():
        f.write(f"{utt} {''.join('[ ' + ''.join(f'{p} {w} ' for p, w in frame) + '] ' for frame in post)}\n")
with open(f"{out}/post.ark", "wb") as f:
    for utt, post in soft.items():
        write_posterior(f, utt, post)
