"""The original CIFAR python pickles: `cifar-10-batches-py/` and `cifar-100-python/`."""

from __future__ import annotations

import os
import pickle

import numpy as np

from forge_tflm.data.imageset import DatasetFormatError, DatasetNotFoundError, ImageSet

CIFAR10_DIR = "cifar-10-batches-py"
CIFAR100_DIR = "cifar-100-python"


def _unpickle(path: str) -> dict:
  if not os.path.isfile(path):
    raise DatasetNotFoundError(f"missing {path} (CIFAR pickle layout)")
  try:
    with open(path, "rb") as f:
      data = pickle.load(f, encoding="bytes")
  except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
          ImportError, IndexError, KeyError) as e:
    raise DatasetFormatError(f"{path}: not a CIFAR pickle ({type(e).__name__}:"
                             f" {str(e)[:120]})") from e
  if not isinstance(data, dict):
    raise DatasetFormatError(f"{path}: not a CIFAR pickle (a dict expected, got"
                             f" {type(data).__name__})")
  return _Named(path, data)


class _Named(dict):
  """An unpickled dict that knows its file, for error messages."""

  def __init__(self, path: str, data: dict):
    super().__init__(data)
    self.path = path


def _get(d: dict, key: str):
  if key.encode() in d:
    return d[key.encode()]
  if key in d:
    return d[key]
  raise DatasetFormatError(f"{getattr(d, 'path', 'CIFAR pickle')}: no {key!r} entry"
                           f" (has: {', '.join(map(str, d))[:120]})")


def _rows_to_images(data: np.ndarray) -> np.ndarray:
  # Rows are 3072 bytes: 1024 red, 1024 green, 1024 blue, each row-major 32x32.
  return np.ascontiguousarray(
      np.asarray(data, dtype=np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))


def find_pickle_dir(path: str) -> tuple[str, str] | None:
  """Returns (directory, 'cifar10'|'cifar100') if `path` is or holds a pickle dir."""
  for candidate in (path, os.path.join(path, CIFAR10_DIR), os.path.join(path, CIFAR100_DIR)):
    if os.path.isfile(os.path.join(candidate, "data_batch_1")):
      return candidate, "cifar10"
    if os.path.isfile(os.path.join(candidate, "train")) and os.path.isfile(
        os.path.join(candidate, "meta")):
      return candidate, "cifar100"
  return None


def load_cifar_pickles(path: str, split: str, fine_labels: bool = True) -> ImageSet:
  found = find_pickle_dir(path)
  if found is None:
    raise DatasetNotFoundError(
        f"no CIFAR pickles in {path!r} (looked for data_batch_1 or train+meta, also in"
        f" {CIFAR10_DIR}/ and {CIFAR100_DIR}/)")
  directory, kind = found
  if split not in ("train", "test"):
    raise ValueError(f"CIFAR has splits 'train' and 'test', not {split!r}")
  if kind == "cifar10":
    files = [f"data_batch_{i}" for i in range(1, 6)] if split == "train" else ["test_batch"]
    meta = _unpickle(os.path.join(directory, "batches.meta"))
    names = tuple(n.decode() if isinstance(n, bytes) else n
                  for n in _get(meta, "label_names"))
    label_key = "labels"
  else:
    files = [split]
    meta = _unpickle(os.path.join(directory, "meta"))
    key = "fine_label_names" if fine_labels else "coarse_label_names"
    names = tuple(n.decode() if isinstance(n, bytes) else n for n in _get(meta, key))
    label_key = "fine_labels" if fine_labels else "coarse_labels"
  images, labels = [], []
  for name in files:
    batch = _unpickle(os.path.join(directory, name))
    try:
      images.append(_rows_to_images(_get(batch, "data")))
      labels.append(np.asarray(_get(batch, label_key), dtype=np.int64))
    except (ValueError, TypeError) as e:
      if isinstance(e, DatasetFormatError):
        raise
      raise DatasetFormatError(f"{batch.path}: malformed CIFAR batch ({e})") from e
    if len(labels[-1]) != len(images[-1]):
      raise DatasetFormatError(f"{batch.path}: {len(labels[-1])} labels for"
                               f" {len(images[-1])} images")
  return ImageSet(np.concatenate(images), np.concatenate(labels), names,
                  f"{directory} [{split}]")
