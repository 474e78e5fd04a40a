"""Where evaluation streams come from: generated corruptions, CIFAR-C .npy, tfds."""

from __future__ import annotations

from typing import Iterator, Sequence

from forge_tflm.data.imageset import ImageSet
from forge_tflm.evaluation.protocol import Stream


def generated_streams(clean: ImageSet, corruptions: Sequence[str], severity: int,
                      seed: int = 0, include_clean: bool = False,
                      cache_dir: str | None = None) -> Iterator[Stream]:
  """Corrupts `clean` on the fly (cached on disk) with the generators of this package."""
  from forge_tflm.corruptions import corrupt_cached

  if include_clean:
    yield Stream("clean", clean.images, clean.labels)
  for name in corruptions:
    images = corrupt_cached(clean.images, name, severity, seed=seed, cache_dir=cache_dir)
    yield Stream(name, images, clean.labels)


def cifar_c_streams(directory: str, corruptions: Sequence[str], severity: int,
                    limit: int | None = None, seed: int = 0) -> Iterator[Stream]:
  """Streams from an official CIFAR-10-C / CIFAR-100-C directory of .npy files."""
  from forge_tflm.data.cifar_c import load_cifar_c

  for name in corruptions:
    data = load_cifar_c(directory, name, severity).random_subset(limit, seed)
    yield Stream(name, data.images, data.labels)


def tfds_streams(corruptions: Sequence[str], severity: int, limit: int | None = None,
                 seed: int = 0, tfds_data_dir: str | None = None) -> Iterator[Stream]:
  """Streams from tensorflow-datasets `cifar10_corrupted` (prepared, offline)."""
  from forge_tflm.data import load_tfds_corrupted

  for name in corruptions:
    data = load_tfds_corrupted(name, severity, tfds_data_dir).random_subset(limit, seed)
    yield Stream(name, data.images, data.labels)


def corruption_streams(source: str, corruptions: Sequence[str], severity: int, *,
                       clean: ImageSet | None = None, cifar_c_dir: str | None = None,
                       limit: int | None = None, seed: int = 0,
                       include_clean: bool = False) -> Iterator[Stream]:
  """One stream per corruption at `severity` from `source` (eval's --corrupted_from):
  "generated" corrupts `clean` (and can add it as a stream), "cifar_c" reads
  `cifar_c_dir`, "tfds" the prepared cifar10_corrupted."""
  if source == "generated":
    return generated_streams(clean, corruptions, severity, seed, include_clean)
  if source == "cifar_c":
    return cifar_c_streams(cifar_c_dir, corruptions, severity, limit, seed)
  return tfds_streams(corruptions, severity, limit, seed)
