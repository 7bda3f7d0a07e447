"""Config options of Kaldi's components that need Indexes beyond row-wise work (statistics, convolution,
attention, ...): `NONSIMPLE_SAMPLES[type] = (options, input dim, output dim)`, one valid config per type.

tests/components/test_components_nonsimple.py builds each one; tests/kaldi/test_kaldi_network.py checks
that these and its own samples of the row-wise types cover every registered component type.
"""

NONSIMPLE_SAMPLES = {
    "StatisticsExtractionComponent": ({"input-dim": 4, "output-period": 2, "include-variance": "false"}, 4, 5),
    "StatisticsPoolingComponent": (
        {
            "input-dim": 9,
            "input-period": 2,
            "left-context": 4,
            "right-context": 0,
            "num-log-count-features": 2,
            "output-stddevs": "true",
            "variance-floor": 1e-6,
        },
        9,
        10,
    ),
    "TimeHeightConvolutionComponent": (
        {
            "num-filters-in": 2,
            "num-filters-out": 3,
            "height-in": 4,
            "height-out": 2,
            "height-subsample-out": 2,
            "height-offsets": "0,1",
            "time-offsets": "-2,0",
            "required-time-offsets": "0",
            "param-stddev": 0.1,
            "alpha-in": 2.0,
            "learning-rate-factor": 0.5,
        },
        8,
        6,
    ),
    "ConvolutionComponent": (
        {
            "input-x-dim": 3,
            "input-y-dim": 2,
            "input-z-dim": 1,
            "filt-x-dim": 1,
            "filt-y-dim": 2,
            "filt-x-step": 1,
            "filt-y-step": 1,
            "num-filters": 4,
            "bias-stddev": 0.0,
            "input-vectorization-order": "yzx",
        },
        6,
        12,
    ),
    "MaxpoolingComponent": (
        {
            "input-x-dim": 2,
            "input-y-dim": 2,
            "input-z-dim": 2,
            "pool-x-size": 2,
            "pool-y-size": 1,
            "pool-z-size": 1,
            "pool-x-step": 1,
            "pool-y-step": 1,
            "pool-z-step": 1,
        },
        8,
        4,
    ),
    "RestrictedAttentionComponent": (
        {
            "num-heads": 2,
            "key-dim": 1,
            "value-dim": 2,
            "num-left-inputs": 1,
            "num-right-inputs": 0,
            "time-stride": 3,
            "output-context": "false",
        },
        12,
        4,
    ),
    "DistributeComponent": ({"input-dim": 6, "output-dim": 3}, 6, 3),
    "CompositeComponent": (
        {
            "num-components": 2,
            "component1": "type=AffineComponent input-dim=4 output-dim=3",
            "component2": "type=TanhComponent dim=3",
        },
        4,
        3,
    ),
    "SpecAugmentTimeMaskComponent": ({"dim": 4, "zeroed-proportion": 0.1}, 4, 4),
}
