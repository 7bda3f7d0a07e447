"""Data to train on: synthetic speech corpora (`synthesise_corpus`, `load_corpus`: digit strings and house
commands said by flite's and espeak-ng's voices, as Kaldi data directories with a lexicon and phone
alignments; see docs/corpus.md), and a seeded synthetic "acoustic" task whose best possible frame accuracy is
known exactly (`HmmTask`), described here.

Hidden states follow an HMM shaped like speech: each "phone" is a
left-to-right chain of `states_per_phone` states with self-loops, and when a
phone ends the next phone is drawn from a sparse random phone bigram. Every
frame's features come from a diagonal Gaussian of its state; the state means
overlap, so one frame alone is ambiguous and context (durations, phone order)
helps. Labels are the hidden state of each frame; lengths vary per sequence.

Because the generative model is known, exact forward-backward posteriors give
the Bayes-optimal frame classifier: `bayes_accuracy` is the ceiling any
network can reach, `single_frame_accuracy` what a classifier without context
can reach, and `window_accuracy(d, k)` (nearly) the ceiling of a network that
sees frames t-k..t+k, such as a TDNN with that total context.

    task = HmmTask.create(seed=0)
    train = task.sample(500, seed=1)          # train and valid sets: two
    valid = task.sample(100, seed=2)          # sample calls with other seeds,
    train, valid = train.split(0.9)           # or split one set by sequences

Measured on the defaults (`HmmTask.create(seed=0)`: 10 phones x 3 states = 30
labels, 16 dims, 100-300 frames) over `task.sample(200, seed=1)`, 40 837 frames,
by `python -c "from symnet.datasets import *; t = HmmTask.create(seed=0);
d = t.sample(200, seed=1); print(t.single_frame_accuracy(d),
[t.window_accuracy(d, k) for k in (1, 2, 4, 8)], t.bayes_accuracy(d))"`:

    single frame (no context)   0.580
    window t-1..t+1             0.830
    window t-2..t+2             0.879
    window t-4..t+4             0.900
    window t-8..t+8             0.904
    Bayes (whole sequence)      0.904

So a TDNN that sees frames t-4..t+4 can get within half a point of the limit,
and one frame alone is 32 points short. Within a phone the state means are
close (a phone mean plus a small per-state offset), so the errors left at the
limit are mostly state boundaries inside phones (on `sample(60, seed=1)`, 91%
of the Bayes errors pick another state of the right phone, 94% lie within two
frames of a state change).
"""

from symnet._src.base import exports as _exports

__getattr__, __dir__, __all__ = _exports.attach(__name__, __file__, eager=True)

if __name__ == "__main__":
    import sys

    from symnet._src.corpora.command import main as _main

    sys.exit(_main())
