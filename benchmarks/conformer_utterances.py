"""The Conformer block of docs/worked-examples.md trained on whole 1,000-frame utterances (`chunk=1000`).

    python benchmarks/conformer_utterances.py window   # MultiHeadAttention window=(64, 64)
    python benchmarks/conformer_utterances.py full     # window=None, max_frames=1000

16 training and 4 validation utterances of 1,000 frames (HmmTask), 3 epochs of batches of 4; prints the
training losses, the validation accuracy and the wall time (planning and compiling included).
"""

import sys
import time

import optax

from symnet import DimRange, Input, LogSoftmax, Network, Node, Normal, Offset, Sigmoid, Sum, Weight, Zeros
from symnet.datasets import HmmTask
from symnet.layers import Affine, BatchNorm, LayerNorm, MultiHeadAttention
from symnet.train import fit

full = sys.argv[1] == "full"
task = HmmTask.create(seed=0, min_length=1000, max_length=1000)
train, valid = task.sample(16, seed=1), task.sample(4, seed=2)
D = 32


def swish(a):
    return a * Sigmoid(a)


def feed_forward(h, name):
    inner = Node(f"{name}.inner", Affine(Node(f"{name}.norm", LayerNorm(h)), 2 * D))
    return Node(f"{name}.out", Affine(swish(inner), D))


def conv_module(h, name, offsets=(-2, -1, 0, 1, 2)):
    a = Node(f"{name}.pointwise1", Affine(Node(f"{name}.norm", LayerNorm(h)), 2 * D))
    glu = Node(f"{name}.glu", DimRange(a, 0, D) * Sigmoid(DimRange(a, D, D)))
    depthwise = Sum(*(Offset(glu, o) * Weight(Normal((D,), 0.3)) for o in offsets)) + Weight(Zeros(D))
    normed = Node(f"{name}.batchnorm", BatchNorm(Node(f"{name}.depthwise", depthwise)))
    return Node(f"{name}.pointwise2", Affine(swish(normed), D))


def conformer_block(h, name):
    h = Node(f"{name}.ff1", h + 0.5 * feed_forward(h, f"{name}.ff1"))
    norm = Node(f"{name}.mhsa.norm", LayerNorm(h))
    opts = dict(window=None, max_frames=1000) if full else dict(window=(64, 64))
    h = Node(f"{name}.mhsa.res", h + MultiHeadAttention(f"{name}.mhsa", norm, heads=2, key_dim=8, **opts))
    h = Node(f"{name}.conv", h + conv_module(h, f"{name}.conv"))
    h = Node(f"{name}.ff2", h + 0.5 * feed_forward(h, f"{name}.ff2"))
    return Node(f"{name}.out", LayerNorm(h))


x = Input("input", task.feat_dim)
h = conformer_block(Node("in", Affine(x, D)), "block1")
net = Network(LogSoftmax(Node("output", Affine(h, task.num_states))), seed=0)
t0 = time.perf_counter()
result = fit(net, train, optax.adam(3e-3), valid=valid, epochs=3, batch_size=4, chunk=1000, progress=False)
losses = [round(e.train_loss, 3) for e in result.history]
print(
    "full" if full else "window (64, 64)",
    "losses",
    losses,
    "valid acc",
    round(result.history[-1].valid_accuracy, 3),
    f"{time.perf_counter() - t0:.1f} s",
)
