"""On-disk cache of decoded arrays.

Decoding tens of thousands of JPEGs costs seconds; loading the decoded uint8
array back costs milliseconds. Sources are often read-only (shared dataset
folders), so the cache lives in its own directory: `$FORGE_TFLM_CACHE`, or
`~/.cache/forge_tflm`. Keys include the source's path, size and mtime, so an
edited source is decoded again.
"""

from __future__ import annotations

import hashlib
import os
from typing import Callable

import numpy as np

from forge_tflm.data.imageset import ImageSet
from forge_tflm.fileio import atomic_path

_FORMAT_VERSION = "1"


def cache_dir() -> str:
  return os.environ.get(
      "FORGE_TFLM_CACHE",
      os.path.join(os.path.expanduser("~"), ".cache", "forge_tflm"))


def source_key(path: str, *parts: str) -> str:
  """A key that changes whenever the file or directory at `path` changes."""
  st = os.stat(path)
  text = "|".join([_FORMAT_VERSION, os.path.abspath(path), str(st.st_size),
                   str(st.st_mtime_ns), *parts])
  return hashlib.sha256(text.encode()).hexdigest()[:24]


def atomic_save_npz(path: str, **arrays) -> None:
  """Writes an .npz so that readers never see a half-written file."""
  with atomic_path(path, ".npz") as tmp:
    np.savez(tmp, **arrays)


def cached_imageset(key: str, build: Callable[[], ImageSet],
                    use_cache: bool = True) -> ImageSet:
  """Returns the cached ImageSet for `key`, building and storing it if absent."""
  path = os.path.join(cache_dir(), f"{key}.npz")
  if use_cache and os.path.exists(path):
    try:
      with np.load(path, allow_pickle=False) as z:
        return ImageSet(z["images"], z["labels"],
                        tuple(str(c) for c in z["class_names"]),
                        str(z["source"]))
    except (OSError, ValueError, KeyError):
      pass  # A damaged cache entry is rebuilt below.
  result = build()
  if use_cache:
    try:
      atomic_save_npz(path, images=result.images, labels=result.labels,
                      class_names=np.array(result.class_names),
                      source=np.array(result.source))
    except OSError:
      pass  # Caching is an optimization; an unwritable cache is not an error.
  return result
