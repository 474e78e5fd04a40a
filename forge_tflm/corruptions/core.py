"""Dispatch: validates inputs, picks the parameter set, feeds chunks to the
corruption functions with per-image random generators."""

from __future__ import annotations

import numpy as np

from forge_tflm.corruptions import blur, digital, noise, weather
from forge_tflm.corruptions.common import image_rngs
from forge_tflm.corruptions.params import (ALL_CORRUPTIONS, PARAMETER_SETS,
                                           severity_params)

_FUNCTIONS = {
    "gaussian_noise": noise.gaussian_noise,
    "shot_noise": noise.shot_noise,
    "impulse_noise": noise.impulse_noise,
    "defocus_blur": blur.defocus_blur,
    "glass_blur": blur.glass_blur,
    "motion_blur": blur.motion_blur,
    "zoom_blur": blur.zoom_blur,
    "snow": weather.snow,
    "frost": weather.frost,
    "fog": weather.fog,
    "brightness": digital.brightness,
    "contrast": digital.contrast,
    "elastic_transform": digital.elastic_transform,
    "pixelate": digital.pixelate,
    "jpeg_compression": digital.jpeg_compression,
    "speckle_noise": noise.speckle_noise,
    "gaussian_blur": blur.gaussian_blur,
    "spatter": weather.spatter,
    "saturate": digital.saturate,
}
assert tuple(_FUNCTIONS) == ALL_CORRUPTIONS

# Corruptions whose output does not depend on the seed.
DETERMINISTIC = frozenset({"defocus_blur", "zoom_blur", "brightness", "contrast",
                           "pixelate", "jpeg_compression", "gaussian_blur",
                           "saturate"})

# Images per call of a corruption function: bounds float64 temporaries
# (~25 MB at 32x32) and keeps them cache-friendly.
_CHUNK = 1024


def resolve_param_set(images: np.ndarray, params: str | None) -> str:
  """`params` if given, else "cifar" for 32x32 and "tinyimagenet" for 64x64."""
  if params is not None:
    if params not in PARAMETER_SETS:
      raise ValueError(f"unknown parameter set {params!r}; known: {sorted(PARAMETER_SETS)}")
    return params
  size = images.shape[1:3]
  for name, table in PARAMETER_SETS.items():
    if size == (table["image_size"],) * 2:
      return name
  raise ValueError(f"no parameter set for {size[0]}x{size[1]} images; pass params="
                   f"one of {sorted(PARAMETER_SETS)}")


def check_images(images) -> np.ndarray:
  images = np.asarray(images)
  if images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] != 3:
    raise ValueError(f"images must be uint8 [N,H,W,3], got {images.dtype}"
                     f" {images.shape}")
  return images


def corrupt(images: np.ndarray, corruption: str, severity: int, seed: int = 0,
            params: str | None = None, first_index: int = 0) -> np.ndarray:
  """Applies one corruption at one severity to a batch of images.

  Args:
    images: uint8 [N,H,W,3].
    corruption: one of ALL_CORRUPTIONS (the 15 of CORRUPTIONS or the held-out ones).
    severity: 1..5.
    seed: non-negative seed. Image i draws from its own generator keyed by
      (seed, params, corruption, severity, first_index + i), so results do not
      depend on how a set is split into batches.
    params: "cifar" or "tinyimagenet"; None picks by image size (32 -> cifar,
      64 -> tinyimagenet).
    first_index: absolute index of images[0] within the whole set; pass the
      slice start when corrupting a set in pieces.

  Returns:
    uint8 [N,H,W,3].
  """
  images = check_images(images)
  param_set = resolve_param_set(images, params)
  c = severity_params(param_set, corruption, severity)
  if corruption == "frost":
    c = (*c, PARAMETER_SETS[param_set]["frost_texture_scale"])
  function = _FUNCTIONS[corruption]
  stream = f"{param_set}/{corruption}/{severity}"
  out = np.empty_like(images)
  for start in range(0, len(images), _CHUNK):
    chunk = np.ascontiguousarray(images[start:start + _CHUNK])
    rngs = image_rngs(seed, stream, first_index + start, len(chunk))
    out[start:start + len(chunk)] = function(chunk, c, rngs)
  return out
