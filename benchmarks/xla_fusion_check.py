"""Does XLA:CPU compute W2's gradient right under each set of YNNPACK fusion types? Against float64.

    python benchmarks/xla_fusion_check.py   # W2 with its splices concatenated, at run_all.py --quick sizes

jaxlib 0.10's `xla_cpu_experimental_ynn_fusion_type` chooses which fusions XLA:CPU hands to YNNPACK. symnet
compiled `fit`'s programs with products only (DOT, INDIVIDUAL_DOT, INDIVIDUAL_CONVOLUTION) for a day: steps
were faster, but this check shows the gradient of W2's TDNN (benchmarks/workloads.py, splices as slices
concatenated before one product, 4 chunks of 50 frames) off by about 2.5e-2 of its largest entry with DOT
fusions and without REDUCE ones, while XLA's defaults are within 1.4e-6 of float64. symnet now leaves XLA its
defaults; rerun this on a new jaxlib before asking XLA for anything else.

Each line: the fusion types asked for (`default`: none asked), and the gradient's largest difference from
the float64 gradient, relative to its largest entry, with the parameter where it is; then the same for
symnet's own W2 (a Computation of `w2_network`, both splice lowerings) with XLA's defaults and with the
fusion types symnet asked for that day.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from machine import header
from symnet import IndexSet
from symnet.engine import ComputationRequest, compile
from workloads import SPLICE_VARIANTS, W2_SPLICES, _cross_entropy_delta, _kaldi_normalize, spliced, w2_network

OPTION = "xla_cpu_experimental_ynn_fusion_type"
SETTINGS = (
    "default",
    "DOT+INDIVIDUAL_DOT+INDIVIDUAL_CONVOLUTION",  # what symnet asked for on 2026-12-07
    "DOT+REDUCE",
    "DOT+ELTWISE+REDUCE",
    "DOT",
    "DOT+ELTWISE",
    "INDIVIDUAL_DOT",
    "ELTWISE+REDUCE",
)


def loss_function(num_sequences: int, frames_out: int, outputs: int, variant: str):
    """W2's reference loss (workloads.w2) as `variant` writes its splices."""
    frames_in = frames_out + 20

    def loss(p, x, labels):
        h = x.reshape(frames_in, num_sequences, 40)
        for i, offsets in enumerate(W2_SPLICES, start=1):
            h = _kaldi_normalize(jax.nn.relu(spliced(h, p[f"tdnn{i}.w"], offsets, variant) + p[f"tdnn{i}.b"]))
        logp = jax.nn.log_softmax(h @ p["output.w"] + p["output.b"]).reshape(-1, outputs)
        return _cross_entropy_delta(logp, labels)[0]

    return loss


def options_of(setting: str) -> dict[str, str]:
    """The compiler options that ask for `setting`'s fusion types (none for `default`)."""
    if setting == "default":
        return {}
    return {OPTION: ",".join(f"LIBRARY_FUSION_TYPE_{kind}" for kind in setting.split("+"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sequences", type=int, default=4)
    parser.add_argument("--frames", type=int, default=50)
    parser.add_argument("--variant", default="concat", choices=[v for v in SPLICE_VARIANTS if v != "conv NTD"])
    args = parser.parse_args()
    print(header())
    width, outputs = 512, 2000
    params = w2_network(width, outputs, 0).params
    rng = np.random.default_rng(0)
    feats = np.asarray(rng.standard_normal(((args.frames + 20) * args.sequences, 40)), np.float32)
    labels = jnp.asarray(rng.integers(0, outputs, args.frames * args.sequences), jnp.int32)
    loss = loss_function(args.sequences, args.frames, outputs, args.variant)
    with jax.enable_x64(True):
        p64 = {k: jnp.asarray(v, jnp.float64) for k, v in params.items()}
        exact = jax.jit(jax.grad(loss))(p64, jnp.asarray(feats, jnp.float64), labels)
        exact = {k: np.asarray(v) for k, v in exact.items()}

    def report(setting: str, grads: dict) -> None:
        worst = max(
            (float(np.max(np.abs(np.asarray(g, np.float64) - exact[k])) / np.max(np.abs(exact[k]))), k)
            for k, g in grads.items()
        )
        print(f"  {setting:50s} {worst[0]:.1e} ({worst[1]})", flush=True)

    print(f"W2 ({args.variant}), {args.sequences} chunks of {args.frames} frames; gradient against float64:")
    for setting in SETTINGS:
        report(
            setting, jax.jit(jax.grad(loss), compiler_options=options_of(setting))(params, jnp.asarray(feats), labels)
        )
    net = w2_network(width, outputs, 0)
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=args.sequences, t=(-10, args.frames + 10))},
        outputs={"output": IndexSet.range(n=args.sequences, t=args.frames)},
    )
    for lowering in ("plain", "auto"):
        computation = compile(net, request, lowering)

        def symnet_loss(p, computation=computation):
            out = computation(net.replace(params=p), {"input": jnp.asarray(feats)})["output"]
            return _cross_entropy_delta(out, labels)[0]

        for setting in SETTINGS[:2]:
            grads = jax.jit(jax.grad(symnet_loss), compiler_options=options_of(setting))(net.params)
            report(f"symnet, {lowering} splices, {setting}", grads)


if __name__ == "__main__":
    main()
