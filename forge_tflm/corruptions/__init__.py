"""The 15 common corruptions of the CIFAR-10-C / Tiny-ImageNet-C benchmarks.

This project's own numpy/SciPy/OpenCV implementation of the corruptions defined
by Hendrycks & Dietterich, "Benchmarking Neural Network Robustness to Common
Corruptions and Perturbations" (ICLR 2019), with the benchmark's 32x32 (CIFAR)
and 64x64 (Tiny-ImageNet) severity parameters (params.py): batched,
deterministic by seed, without ImageMagick.

The generator's four extra corruptions (HELD_OUT_CORRUPTIONS: speckle_noise,
gaussian_blur, spatter, saturate; CIFAR parameters) are for design-time choices
such as layer selection, never for evaluation.

  corrupt(images, "fog", 5, seed=0)            # uint8 [N,H,W,3] -> same
  corrupt_cached(images, "fog", 5, cache_dir=...)  # computed once, then loaded
"""

from forge_tflm.corruptions.cache import CODE_VERSION, corrupt_cached
from forge_tflm.corruptions.core import DETERMINISTIC, corrupt, resolve_param_set
from forge_tflm.corruptions.params import (ALL_CORRUPTIONS, CORRUPTIONS, HELD_OUT_CORRUPTIONS,
                                           PARAMETER_SETS, SEVERITIES)

__all__ = [
    "ALL_CORRUPTIONS", "CODE_VERSION", "CORRUPTIONS", "HELD_OUT_CORRUPTIONS", "DETERMINISTIC", "PARAMETER_SETS", "SEVERITIES",
    "corrupt", "corrupt_cached", "resolve_param_set",
]
