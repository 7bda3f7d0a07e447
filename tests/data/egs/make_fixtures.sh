#!/bin/bash
# Makes the nnet3 and chain egs fixtures of tests/train/test_egs.py with Kaldi's own programs, and Kaldi's text
# rendering of each archive (the reference the tests compare symnet's reading of the binary archive with).
# Usage: PATH=/path/to/kaldi-bin/bin:$PATH bash make_fixtures.sh   (run from anywhere; writes next to itself)
# Needs: nnet3-get-egs, gmm-init-mono, ali-to-phones, chain-get-supervision, chain-est-phone-lm,
# chain-make-den-fst, nnet3-chain-get-egs, nnet3-chain-copy-egs; python3 (only to write one CM3 feature archive).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

# Features: u1 24 x 5, u2 16 x 5 (multiples of every chunk size: nnet3-get-egs then places chunks without its random gaps, so that its binary and its text run write the same examples), smooth deterministic values (text archive).
for spec in u1:24 u2:16; do
  awk -v key="${spec%%:*}" -v n="${spec##*:}" 'BEGIN { printf "%s  [\n", key;
    for (t = 0; t < n; t++) { for (j = 0; j < 5; j++) printf " %.4f", 2 * sin(0.37 * t + 1.3 * j + length(key) * n) + 0.1 * j;
      printf (t == n - 1 ? " ]\n" : "\n") } }'
done > feats.txt
# The same features, 1-byte compressed without column headers (CM3, Kaldi's kOneByte), written by hand because no
# Kaldi program here compresses that way: min -2, range 4.4, byte = round((x - min) / range * 255).
python3 - <<'PY'
import struct
out = open("feats_cm3.ark", "wb")
for line in open("feats.txt").read().split("]"):
    line = line.strip()
    if not line:
        continue
    key, _, body = line.partition("[")
    rows = [[float(v) for v in r.split()] for r in body.strip().splitlines()]
    lo, rng = -2.0, 4.4
    data = bytes(min(255, max(0, round((v - lo) / rng * 255))) for r in rows for v in r)
    out.write(key.strip().encode() + b" \0BCM3 " + struct.pack("<ffii", lo, rng, len(rows), len(rows[0])) + data)
PY
# Posteriors over 3 pdfs: frame t has pdf t % 3 (weight 1), every fifth frame splits 0.75/0.25 with the next pdf.
for spec in u1:24 u2:16; do
  awk -v key="${spec%%:*}" -v n="${spec##*:}" 'BEGIN { printf "%s", key;
    for (t = 0; t < n; t++) { if (t % 5 == 4) printf " [ %d 0.75 %d 0.25 ]", t % 3, (t + 1) % 3; else printf " [ %d 1 ]", t % 3 }
    printf "\n" }'
done > post.txt

post=post.txt
eg() {  # eg NAME FEATURES OPTIONS...: binary archive NAME.ark and Kaldi's text rendering NAME.txt of the same egs
  local name=$1 feats=$2; shift 2
  nnet3-get-egs --num-pdfs=3 "$@" "$feats" ark,t:$post ark:"$here/$name.ark"
  nnet3-get-egs --num-pdfs=3 "$@" "$feats" ark,t:$post ark,t:"$here/$name.txt"
}
# full matrices (FM), 1-byte with column headers (CM: chunks of 8 or more rows), 2-byte (CM2: Kaldi's kSpeechFeature
# compression gives CM2 for fewer than 8 rows), 1-byte without headers (CM3, features compressed beforehand)
eg egs_fm ark,t:feats.txt --compress=false --left-context=2 --right-context=1 --num-frames=8
eg egs_cm ark,t:feats.txt --compress=true --left-context=2 --right-context=1 --num-frames=8
eg egs_cm2 ark,t:feats.txt --compress=true --left-context=1 --right-context=1 --num-frames=4
eg egs_cm3 ark:feats_cm3.ark --left-context=2 --right-context=1 --num-frames=8

# a second input (ivector; period 100 and one row an utterance: always that row, not a random frame's)
awk '/\[/ { printf "%s  [\n", $1; getline; print $0 " ]" }' feats.txt > ivectors.txt
eg egs_ivec ark,t:feats.txt --compress=false --online-ivectors=ark,t:ivectors.txt --online-ivector-period=100 --left-context=2 --right-context=2 --num-frames=8
cp feats.txt post.txt "$here/"

# Chain: a monophone model of 4 phones, alignments, supervision (tolerances, subsampling 3), egs.
cat > topo <<'T'
<Topology>
<TopologyEntry>
<ForPhones>
1 2 3 4
</ForPhones>
<State> 0 <PdfClass> 0 <Transition> 0 0.5 <Transition> 1 0.5 </State>
<State> 1 </State>
</TopologyEntry>
</Topology>
T
ali() {  # phone:frames ... -> transition ids (phone p: 2p-1 on each frame but the last, 2p on the last)
  for pk in "$@"; do p=${pk%%:*}; k=${pk##*:}; for ((i = 1; i < k; i++)); do printf " %d" $((2 * p - 1)); done; printf " %d" $((2 * p)); done
}
{ echo "u1$(ali 1:6 2:5 3:7 4:6)"; echo "u2$(ali 3:4 1:5 2:7)"; } > ali.txt
printf 'u1 1 2 3 4\nu2 3 1 2\nu3 2 4 1 3\n' > phones.txt
gmm-init-mono topo 5 mono.mdl mono.tree
ali-to-phones --write-lengths=true mono.mdl ark:ali.txt ark:phone_lengths.ark
chain-get-supervision --frame-subsampling-factor=3 --left-tolerance=1 --right-tolerance=1 mono.tree mono.mdl \
  ark:phone_lengths.ark ark:sup.ark
chain-est-phone-lm ark:phones.txt phone_lm.fst
chain-make-den-fst mono.tree mono.mdl phone_lm.fst den.fst normalization.fst
ceg() {  # ceg NAME OPTIONS...: binary NAME.ark, and Kaldi's text rendering NAME.txt by nnet3-chain-copy-egs
  local name=$1; shift
  nnet3-chain-get-egs "$@" normalization.fst ark,t:feats.txt ark:sup.ark ark:"$here/$name.ark"
  nnet3-chain-copy-egs ark:"$here/$name.ark" ark,t:"$here/$name.txt"
}
ceg cegs_fm --compress=false --left-context=2 --right-context=2 --num-frames=9 --frame-subsampling-factor=3
ceg cegs_cm --compress=true --left-context=2 --right-context=2 --num-frames=9 --frame-subsampling-factor=3
cp ali.txt "$here/"
ls -l "$here"
