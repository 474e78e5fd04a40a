"""Random streams and pixel conversions shared by every corruption."""

from __future__ import annotations

import zlib

import numpy as np


def image_rngs(seed: int, stream: str, first_index: int,
               count: int) -> list[np.random.Generator]:
  """One generator per image, keyed by (seed, stream, absolute image index).

  Keying on the absolute index (not on the batch) makes image i come out the
  same whether it is corrupted alone, in a slice, or in the whole set.

  Args:
    seed: non-negative user seed.
    stream: names the corruption/severity/parameter set, so that each gets
      independent randomness under the same seed.
    first_index: absolute index of the first image of the batch.
    count: number of images.
  """
  if seed < 0 or first_index < 0:
    raise ValueError(f"seed and first_index must be >= 0, got {seed}, {first_index}")
  salt = zlib.crc32(stream.encode())
  return [np.random.default_rng([seed, salt, first_index + i]) for i in range(count)]


def to_unit(images: np.ndarray, dtype=np.float64) -> np.ndarray:
  return images.astype(dtype) / 255.0


def unit_to_uint8(x: np.ndarray) -> np.ndarray:
  """[0,1] floats -> uint8 the way the originals store them.

  The generators return `clip(x, 0, 1) * 255` and the caller keeps
  `np.uint8(...)` of it, which truncates; doing the same keeps the pixel
  statistics (about half a level of mean shift) identical.
  """
  return (np.clip(x, 0.0, 1.0) * 255.0).astype(np.uint8)


def levels_to_uint8(x: np.ndarray) -> np.ndarray:
  """[0,255] floats -> uint8 by truncation, as `np.uint8` does in the originals."""
  return np.clip(x, 0.0, 255.0).astype(np.uint8)


def round_to_uint8(x: np.ndarray) -> np.ndarray:
  """[0,255] floats -> uint8 by rounding, as ImageMagick writing a PNG does."""
  return np.clip(np.floor(x + 0.5), 0.0, 255.0).astype(np.uint8)
