#!/bin/bash
# Remakes the LDA fixtures in this folder: the inputs (make_inputs.py), init.config of each xconfig (symnet
# xconfig --config-dir) and what Kaldi computes from them: egs (nnet3-get-egs, not kept), LDA statistics
# (nnet3-acc-lda-stats, *.acc) and transforms (nnet-get-feature-transform, *.mat), binary as recipes write them.
# tests/kaldi/test_lda.py checks symnet's numbers against these files; it needs none of the programs.
#
# Needs nnet3-init, nnet3-get-egs, nnet3-acc-lda-stats and nnet-get-feature-transform on PATH (the files here
# were made with the binaries of /work/shared/kaldi-bin.tar.xz, Kaldi commit f4007661023b, 2025-07-22), and
# $PYTHON (default python3) with numpy, able to import symnet from this checkout.
#
#   PATH=$HOME/kaldi-bin/bin:$PATH bash tests/data/lda/make_fixtures.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
PYTHON=${PYTHON:-python3}
cd "$here"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
set -x

"$PYTHON" make_inputs.py .
for net in ivector plain; do
  PYTHONPATH="$root" "$PYTHON" -m symnet.cli xconfig --config-dir "$tmp/$net" "$net.xconfig"
  cp "$tmp/$net/init.config" "$net.init.config"
  nnet3-init "$net.init.config" "$tmp/$net.raw"
done

# Every utterance's length is a multiple of --num-frames, so the egs hold each frame once, in order, with weight 1;
# --compress=false keeps the features exact. The online i-vectors are constant in each utterance, so the row the
# egs take (of a random frame) does not matter. ali_post.txt is ali.ark as ali-to-post writes it.
ivector_opts="--left-context=1 --right-context=1 --online-ivectors=ark:online_ivectors.ark --online-ivector-period=10"
plain_opts="--left-context=2 --right-context=2"
for net in ivector plain; do
  opts=${net}_opts
  for targets in ali_post post; do
    nnet3-get-egs --num-pdfs=24 --num-frames=8 --compress=false ${!opts} \
      ark:feats.ark "ark:$targets.txt" "ark:$tmp/$net-$targets.egs"
  done
done

acc() {  # NAME NET TARGETS [nnet3-acc-lda-stats options]
  local name=$1 net=$2 targets=$3
  shift 3
  nnet3-acc-lda-stats "$@" "$tmp/$net.raw" "ark:$tmp/$net-$targets.egs" "$name.acc"
}
acc ivector_ali ivector ali_post
acc ivector_post ivector post
acc plain_ali plain ali_post
acc plain_post plain post
acc ivector_ali_prune4 ivector ali_post --rand-prune=4.0  # what the recipes pass
acc ivector_post_prune4 ivector post --rand-prune=4.0
acc plain_post_prune05 plain post --rand-prune=0.5  # weights both below and above the threshold

for name in ivector_ali ivector_post plain_ali plain_post ivector_ali_prune4 ivector_post_prune4 plain_post_prune05; do
  nnet-get-feature-transform "$name.mat" "$name.acc"  # the recipes' call: every option at its default
done
nnet-get-feature-transform --within-class-factor=1.0 --max-singular-value=0 ivector_post_lda.mat ivector_post.acc
nnet-get-feature-transform --dim=10 --within-class-factor=0.5 --max-singular-value=2 --remove-offset=false \
  --binary=false ivector_post_options.mat ivector_post.acc
nnet-get-feature-transform --dim=12 --remove-offset=true --within-class-factor=0.01 plain_ali_dim12.mat plain_ali.acc
