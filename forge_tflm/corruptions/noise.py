"""Noise corruptions: gaussian_noise, shot_noise, impulse_noise, speckle_noise (held out).

Each takes uint8 images [N,H,W,3], the severity's table entry and one
generator per image, and returns uint8 images of the same shape.
"""

from __future__ import annotations

import numpy as np

from forge_tflm.corruptions.common import to_unit, unit_to_uint8


def gaussian_noise(images: np.ndarray, std: float, rngs) -> np.ndarray:
  x = to_unit(images)
  noise = np.stack([rng.normal(scale=std, size=images.shape[1:]) for rng in rngs])
  return unit_to_uint8(x + noise)


def shot_noise(images: np.ndarray, photons: float, rngs) -> np.ndarray:
  x = to_unit(images)
  counts = np.stack([rng.poisson(xi * photons) for rng, xi in zip(rngs, x)])
  return unit_to_uint8(counts / photons)


def impulse_noise(images: np.ndarray, amount: float, rngs) -> np.ndarray:
  """skimage.util.random_noise(mode="s&p"): each value independently (per
  channel) becomes 0 or 1 with probability `amount`, salt and pepper equally."""
  x = to_unit(images)
  draws = np.stack([rng.random((2,) + images.shape[1:]) for rng in rngs])
  flipped = draws[:, 0] < amount
  salted = draws[:, 1] < 0.5
  x[flipped & salted] = 1.0
  x[flipped & ~salted] = 0.0
  return unit_to_uint8(x)


def speckle_noise(images: np.ndarray, std: float, rngs) -> np.ndarray:
  """Multiplicative Gaussian noise: x + x * N(0, std)."""
  x = to_unit(images)
  noise = np.stack([rng.normal(scale=std, size=images.shape[1:]) for rng in rngs])
  return unit_to_uint8(x + x * noise)
