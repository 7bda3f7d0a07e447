#!/bin/bash
# Makes the chunk-numerator fixtures of tests/chain/test_chunk_numerator.py with real Kaldi (5.5.1181):
# bash make.sh [path/to/kaldi-bin] (default /tmp/kaldi/kaldi-bin; ../shared/kaldi-bin.tar.xz). Tests read what it
# keeps and need no Kaldi.
#
# Two scenarios made as a chain recipe makes its egs: <s>.lengths.txt, 12 utterances of random phone sequences
# (phone 1, silence, at both ends; a phone is sometimes said twice in a row, which only (phone, length) pairs
# can tell apart) with random durations (3-10 frames; 9-16 for `three`), in `ali-to-phones --write-lengths`'s format;
# <s>.feats.txt, one feature per frame (text archive); a monophone model
# (gmm-init-mono) of the scenario's topology; a phone LM (chain-est-phone-lm); <s>.den.fst and <s>.norm.fst
# (chain-make-den-fst's normalization FST); supervision (chain-get-supervision) at frame subsampling 3 with the
# scenario's tolerances; <s>.egs.ark.xz, chain egs (nnet3-chain-get-egs with the normalization FST composed in, one
# feature dimension, 5 frames of left context and 3 of right) of the scenario's chunk size, overlapping their neighbours.
#   chain: Kaldi's chain topology (topochain of ../chain/phone_lm), 12 phones, 4-gram LM, tolerances 5/5,
#          chunks of 45 frames;
#   three: a 3-state left-to-right topology with unequal transition probabilities, 8 phones, 3-gram LM,
#          tolerances 2/3, chunks of 60 frames; phones of at least 9 frames (3 output frames, one a state).
set -euo pipefail
kaldi=${1:-/tmp/kaldi/kaldi-bin}
here=$(cd "$(dirname "$0")" && pwd)
export PATH="$kaldi/bin:$PATH"
cd "$here"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/chain.topo" <<'TOPO'
<Topology>
<TopologyEntry>
<ForPhones>
1 2 3 4 5 6 7 8 9 10 11 12
</ForPhones>
<State> 0 <ForwardPdfClass> 0 <SelfLoopPdfClass> 1 <Transition> 0 0.5 <Transition> 1 0.5 </State>
<State> 1 </State>
</TopologyEntry>
</Topology>
TOPO
cat > "$tmp/three.topo" <<'TOPO'
<Topology>
<TopologyEntry>
<ForPhones>
1 2 3 4 5 6 7 8
</ForPhones>
<State> 0 <PdfClass> 0 <Transition> 0 0.75 <Transition> 1 0.25 </State>
<State> 1 <PdfClass> 1 <Transition> 1 0.6 <Transition> 2 0.4 </State>
<State> 2 <PdfClass> 2 <Transition> 2 0.3 <Transition> 3 0.7 </State>
<State> 3 </State>
</TopologyEntry>
</Topology>
TOPO
for spec in "chain 12 4 5 5 45 3" "three 8 3 2 3 60 9"; do
  set -- $spec
  s=$1 phones=$2 order=$3 left=$4 right=$5 frames=$6 shortest=$7
  cp "$tmp/$s.topo" $s.topo
  python3 - "$s" "$phones" "$shortest" <<'PY'
import random, sys
name, phones, shortest = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
random.seed(7)
with open(f"{name}.lengths.txt", "w") as lengths, open(f"{name}.phones.txt", "w") as seqs, open(f"{name}.feats.txt", "w") as feats:
    for u in range(12):
        seq = [1]
        for _ in range(random.randint(8, 30)):
            seq.append(seq[-1] if random.random() < 0.15 and seq[-1] != 1 else random.randint(2, phones))
        seq.append(1)
        durations = [random.randint(shortest, shortest + 7) for _ in seq]
        key = f"{name}{u:02d}"
        lengths.write(f"{key} " + " ; ".join(f"{p} {d}" for p, d in zip(seq, durations)) + "\n")
        seqs.write(f"{key} " + " ".join(map(str, seq)) + "\n")
        feats.write(f"{key} [\n" + "\n".join(f"{random.gauss(0, 1):.3f}" for _ in range(sum(durations))) + " ]\n")
PY
  gmm-init-mono $s.topo 1 "$tmp/$s.mdl" "$tmp/$s.tree" 2>/dev/null
  chain-est-phone-lm --ngram-order=$order ark:$s.phones.txt "$tmp/$s.lm.fst" 2>/dev/null
  chain-make-den-fst "$tmp/$s.tree" "$tmp/$s.mdl" "$tmp/$s.lm.fst" $s.den.fst $s.norm.fst 2>/dev/null
  chain-get-supervision --frame-subsampling-factor=3 --left-tolerance=$left --right-tolerance=$right \
    "$tmp/$s.tree" "$tmp/$s.mdl" ark:$s.lengths.txt ark:"$tmp/$s.sup.ark" 2>/dev/null
  nnet3-chain-get-egs --srand=1 --frame-subsampling-factor=3 --num-frames=$frames --left-context=5 \
    --right-context=3 $s.norm.fst ark:$s.feats.txt ark:"$tmp/$s.sup.ark" ark:$s.egs.ark 2>/dev/null
  rm $s.phones.txt
  xz -9 -f $s.egs.ark
done
echo "made: $(ls "$here")"
