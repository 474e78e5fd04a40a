"""The in-memory form every dataset source produces."""

from __future__ import annotations

import dataclasses

import numpy as np


class DatasetNotFoundError(FileNotFoundError):
  """A dataset could not be found; the message lists every place looked at."""


class DatasetFormatError(ValueError):
  """A dataset file is damaged or not what its layout says; the message names it."""


@dataclasses.dataclass(frozen=True)
class ImageSet:
  """Decoded images in a deterministic order.

  Attributes:
    images: uint8 array [N, H, W, 3].
    labels: int64 array [N] indexing `class_names`.
    class_names: label names in label order.
    source: human-readable description of where the data came from.
  """

  images: np.ndarray
  labels: np.ndarray
  class_names: tuple[str, ...]
  source: str

  def __post_init__(self):
    if self.images.ndim != 4 or self.images.shape[-1] != 3:
      raise ValueError(f"images must be [N,H,W,3], got {self.images.shape}")
    if self.images.dtype != np.uint8:
      raise ValueError(f"images must be uint8, got {self.images.dtype}")
    if self.labels.shape != (self.images.shape[0],):
      raise ValueError(
          f"labels shape {self.labels.shape} does not match"
          f" {self.images.shape[0]} images")

  def __len__(self) -> int:
    return int(self.images.shape[0])

  @property
  def num_classes(self) -> int:
    return len(self.class_names)

  def take(self, indices) -> "ImageSet":
    """Returns the subset at `indices` (any numpy index), in that order."""
    return ImageSet(self.images[indices], self.labels[indices],
                    self.class_names, self.source)

  def random_subset(self, n: int | None, seed: int = 0) -> "ImageSet":
    """`n` images drawn without replacement by `seed`, kept in dataset order.

    None or n >= len(self) returns the whole set.
    """
    if not n or n >= len(self):
      return self
    return self.take(np.sort(np.random.default_rng(seed).permutation(len(self))[:n]))
