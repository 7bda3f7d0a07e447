#!/bin/bash
# Makes the phone-LM and den.fst fixtures from real Kaldi (5.5.1181): bash make.sh [path/to/kaldi-bin]
# (default /tmp/kaldi/kaldi-bin), run from a checkout with .venv (for the built-in task's transcripts).
# task.txt: phone transcripts (phones + 1) of 60 sequences of the built-in task of tests/chain/test_phone_lm.py;
# rand.txt: 80 random sequences of 12 phones from a skewed bigram (so pruning has choices to make).
# lm.<data>.<i>.fst: chain-est-phone-lm with the options in opts.<i>; den.task.fst: chain-make-den-fst of
# lm.task.0.fst with topo2 (2 states, pdf per state); den.rand.fst: of lm.rand.2.fst with Kaldi's chain
# topology (topochain). sup.<m2|mc>.<k>.<left><right>.txt: chain-get-supervision of the phone lengths in pl5.txt
# (topo2's model) and pl12.txt (the chain topology's) at frame subsampling k with those tolerances.
# Tests read these and need no Kaldi.
set -euo pipefail
kaldi=${1:-/tmp/kaldi/kaldi-bin}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
export PATH="$kaldi/bin:$PATH"
cd "$here"
PYTHONPATH="$root" "$root/.venv/bin/python" - <<'PY'
import numpy as np
from symnet.datasets import HmmTask
task = HmmTask.create(seed=0, num_phones=5, successors=2, states_per_phone=2, feat_dim=6, min_length=40, max_length=80)
with open("task.txt", "w") as f:
    for i, t in enumerate(task.transcripts(task.sample(60, seed=1))):
        f.write(f"u{i} " + " ".join(str(int(p) + 1) for p in t) + "\n")
import random
random.seed(1)
with open("pl5.txt", "w") as f5, open("pl12.txt", "w") as f12:
    for i in range(6):
        for f, phones in ((f5, 5), (f12, 12)):
            previous, parts = None, []
            for _ in range(random.randint(3, 8)):
                p = random.choice([q for q in range(1, phones + 1) if q != previous])
                previous = p
                parts.append(f"{p} {random.randint(1, 9)}")
            f.write(f"s{i} " + " ; ".join(parts) + "\n")
rng = np.random.default_rng(0)
bigram = rng.dirichlet(np.ones(12) * 0.3, size=12)
with open("rand.txt", "w") as f:
    for i in range(80):
        s = [rng.integers(12)]
        for _ in range(rng.integers(3, 30) - 1):
            s.append(rng.choice(12, p=bigram[s[-1]]))
        f.write(f"r{i} " + " ".join(str(int(p) + 1) for p in s) + "\n")
PY
i=0
while read -r o; do
  echo "$o" > opts.$i
  for d in task rand; do chain-est-phone-lm $o ark:$d.txt lm.$d.$i.fst 2>/dev/null; done
  i=$((i + 1))
done <<'OPTS'

--ngram-order=3 --num-extra-lm-states=4
--ngram-order=4 --no-prune-ngram-order=2 --num-extra-lm-states=10
--ngram-order=2 --no-prune-ngram-order=1 --num-extra-lm-states=3
--ngram-order=5 --no-prune-ngram-order=2 --num-extra-lm-states=40
--ngram-order=4 --no-prune-ngram-order=1 --num-extra-lm-states=0
--ngram-order=3 --no-prune-ngram-order=3 --num-extra-lm-states=0
OPTS
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
gmm-init-mono topo2 3 "$tmp/m2.mdl" "$tmp/m2.tree" 2>/dev/null
gmm-init-mono topochain 3 "$tmp/mc.mdl" "$tmp/mc.tree" 2>/dev/null
chain-make-den-fst "$tmp/m2.tree" "$tmp/m2.mdl" lm.task.0.fst den.task.fst "$tmp/norm.fst" 2>/dev/null
chain-make-den-fst "$tmp/mc.tree" "$tmp/mc.mdl" lm.rand.2.fst den.rand.fst "$tmp/norm.fst" 2>/dev/null
for k in 1 3; do
  for tol in "5 5" "0 2" "1 1"; do
    set -- $tol
    for m in m2:pl5 mc:pl12; do
      chain-get-supervision --frame-subsampling-factor=$k --left-tolerance=$1 --right-tolerance=$2 \
        "$tmp/${m%:*}.tree" "$tmp/${m%:*}.mdl" ark:${m#*:}.txt ark,t:sup.${m%:*}.$k.$1$2.txt 2>/dev/null || true  # some utterances fail, as intended
    done
  done
done
