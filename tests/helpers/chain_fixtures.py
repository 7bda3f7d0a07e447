"""Readers of the chain fixtures made by real Kaldi (tests/data/chain, make.sh there): its text matrices,
the options a fixture was computed with, and nnet3-chain-compute-prob's printed objective."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from symnet.chain import ChainOptions

DATA = Path(__file__).resolve().parents[1] / "data" / "chain"


def read_text_matrices(path):
    out = {}
    for key, body in re.findall(r"(\S+)\s+\[(.*?)\]", path.read_text(), re.S):
        out[key] = np.array([[float(v) for v in row.split()] for row in body.strip().splitlines()], np.float32)
    return out


def kaldi_options(path):
    values = dict(re.findall(r"--([\w-]+)=(\S+)", path.read_text()))
    return ChainOptions(
        l2_regularize=float(values.get("l2-regularize", 0.0)),
        leaky_hmm_coefficient=float(values.get("leaky-hmm-coefficient", 1e-5)),
    )


def kaldi_prob(path):
    line = path.read_text()
    m = re.search(r"is (\S+) \+ (\S+) = (\S+) per frame, over (\S+) frames", line)
    if m:
        return float(m[1]), float(m[2]), float(m[4])
    m = re.search(r"is (\S+) per frame, over (\S+) frames", line)
    assert m, line
    return float(m[1]), 0.0, float(m[2])
