"""Corrupted streams cached on disk as .npy, keyed by inputs and code version."""

from __future__ import annotations

import hashlib
import os
import time

import numpy as np
from absl import logging

from forge_tflm.corruptions.core import check_images, corrupt, resolve_param_set
from forge_tflm.fileio import atomic_path

# Bump whenever any corruption's output for given inputs changes, so stale
# cache entries are never read.
CODE_VERSION = "1"


def default_cache_dir() -> str:
  from forge_tflm.data.cache import cache_dir  # pylint: disable=import-outside-toplevel
  return os.path.join(cache_dir(), "corruptions")


def cache_key(images: np.ndarray, corruption: str, severity: int, seed: int,
              param_set: str, first_index: int) -> str:
  digest = hashlib.sha256()
  header = "|".join(str(p) for p in (CODE_VERSION, corruption, severity, seed,
                                     param_set, first_index, images.shape))
  digest.update(header.encode())
  digest.update(np.ascontiguousarray(images).data)
  return digest.hexdigest()[:32]


def corrupt_cached(images: np.ndarray, corruption: str, severity: int,
                   seed: int = 0, params: str | None = None,
                   cache_dir: str | None = None, first_index: int = 0) -> np.ndarray:
  """`corrupt(...)`, computed once and then loaded from `cache_dir`.

  The file name hashes the image bytes, the arguments and CODE_VERSION.
  Writes go to a temporary file that is renamed into place, so concurrent
  readers never see a partial file. An unreadable entry is recomputed; an
  unwritable cache directory only costs the caching.

  Args:
    cache_dir: where the .npy files live; default `$FORGE_TFLM_CACHE/corruptions`
      (or ~/.cache/forge_tflm/corruptions).
    Others: as `corrupt`.
  """
  images = check_images(images)
  param_set = resolve_param_set(images, params)
  directory = cache_dir or default_cache_dir()
  key = cache_key(images, corruption, severity, seed, param_set, first_index)
  path = os.path.join(directory, f"{corruption}-{severity}-{key}.npy")
  if os.path.exists(path):
    try:
      cached = np.load(path, allow_pickle=False)
      if cached.shape == images.shape and cached.dtype == np.uint8:
        return cached
    except (OSError, ValueError):
      pass  # Damaged entry: recomputed and overwritten below.
  t0 = time.perf_counter()
  result = corrupt(images, corruption, severity, seed=seed, params=param_set,
                   first_index=first_index)
  logging.info("generated %s severity %d for %d images in %.1f s (cached in %s)",
               corruption, severity, len(images), time.perf_counter() - t0, directory)
  try:
    with atomic_path(path, ".npy") as tmp:
      np.save(tmp, result)
  except OSError:
    pass  # An unwritable cache only costs the caching.
  return result
