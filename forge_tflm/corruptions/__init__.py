"""The 15 common corruptions of Hendrycks & Dietterich (CIFAR-10-C style).

Numpy/SciPy/OpenCV re-implementations of make_cifar_c.py (32x32) and
make_tinyimagenet_c.py (64x64), batched, deterministic by seed, without
ImageMagick. See params.py for the parameter tables.

  corrupt(images, "fog", 5, seed=0)            # uint8 [N,H,W,3] -> same
  corrupt_cached(images, "fog", 5, cache_dir=...)  # computed once, then loaded
"""

from forge_tflm.corruptions.cache import CODE_VERSION, corrupt_cached
from forge_tflm.corruptions.core import DETERMINISTIC, corrupt, resolve_param_set
from forge_tflm.corruptions.params import CORRUPTIONS, PARAMETER_SETS, SEVERITIES

__all__ = [
    "CODE_VERSION", "CORRUPTIONS", "DETERMINISTIC", "PARAMETER_SETS", "SEVERITIES",
    "corrupt", "corrupt_cached", "resolve_param_set",
]
