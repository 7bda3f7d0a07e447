#!/bin/bash
# Makes the chain fixtures from real Kaldi (5.5.1181): bash make.sh [path/to/kaldi-bin]  (default /tmp/kaldi/kaldi-bin).
# Inputs are Kaldi's own smoke-test files (smoke/: topo, phones.txt, ali.txt, feats.ark, net.config): a
# monophone model of 4 one-state phones, a phone LM, den.fst, chain supervision and chain egs, for
# frame-subsampling factors 1 and 3. For each: the egs as text (cegs<f>.txt), the network's outputs on each
# eg's input rows as nnet3-compute writes them (outputs<f>.ark), and nnet3-chain-compute-prob's objective
# with the options in opts<f>.txt (prob<f>.txt). Tests read these and need no Kaldi.
set -euo pipefail
kaldi=${1:-/tmp/kaldi/kaldi-bin}
here=$(cd "$(dirname "$0")" && pwd)
smoke=$kaldi/smoke
export PATH="$kaldi/bin:$PATH"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT; cd "$tmp"
gmm-init-mono "$smoke/topo" 4 mono.mdl mono.tree 2>/dev/null
chain-est-phone-lm ark:"$smoke/phones.txt" phone_lm.fst 2>/dev/null
chain-make-den-fst mono.tree mono.mdl phone_lm.fst den.fst normalization.fst 2>/dev/null
cp den.fst "$here/den.fst"
ali-to-phones --write-lengths=true mono.mdl ark:"$smoke/ali.txt" ark:phone_lengths.ark 2>/dev/null
sed 's/dim=3/dim=4/g' "$smoke/net.config" > net4.config
nnet3-init --srand=0 net4.config chain.raw 2>/dev/null
for f in 1 3; do
  case $f in
    1) opts="" ;;
    3) opts="--l2-regularize=0.01 --leaky-hmm-coefficient=0.1" ;;
  esac
  echo "$opts" > "$here/opts$f.txt"
  chain-get-supervision --frame-subsampling-factor=$f mono.tree mono.mdl ark:phone_lengths.ark ark:sup$f.ark 2>/dev/null
  nnet3-chain-get-egs --frame-subsampling-factor=$f --left-context=1 --right-context=0 --num-frames=9 \
    normalization.fst ark:"$smoke/feats.ark" ark:sup$f.ark ark:cegs$f.ark 2>/dev/null
  nnet3-chain-copy-egs ark:cegs$f.ark ark,t:"$here/cegs$f.txt" 2>/dev/null
  # each eg's input matrix as a text archive, for nnet3-compute
  python3 - "$here/cegs$f.txt" > inputs$f.txt <<'PY'
import re, sys
text = open(sys.argv[1]).read()
for m in re.finditer(r"(\S+) <Nnet3ChainEg>.*?<NnetIo> input .*?\[(.*?)\]", text, re.S):
    print(f"{m.group(1)} [{m.group(2)}]")
PY
  nnet3-compute --use-gpu=no chain.raw ark,t:inputs$f.txt ark,t:"$here/outputs$f.ark" 2>/dev/null
  nnet3-chain-compute-prob $opts chain.raw den.fst ark:cegs$f.ark 2>&1 | grep "Overall" > "$here/prob$f.txt"
done
cat "$here"/prob*.txt
