"""The official CIFAR-10-C / CIFAR-100-C directories of `.npy` files.

Each `<corruption>.npy` holds 50,000 uint8 images [N,32,32,3]: severities 1..5
in blocks of 10,000 rows, in the order of the clean test split. `labels.npy`
holds the matching labels (the 10,000 test labels repeated five times).
"""

from __future__ import annotations

import os

import numpy as np

from forge_tflm.data.imageset import DatasetFormatError, DatasetNotFoundError, ImageSet

SEVERITIES = (1, 2, 3, 4, 5)


def list_corruptions(directory: str) -> list[str]:
  if not os.path.isdir(directory):
    raise DatasetNotFoundError(f"CIFAR-C directory {directory!r} does not exist")
  return sorted(n[:-4] for n in os.listdir(directory)
                if n.endswith(".npy") and n != "labels.npy")


def _load_npy(path: str) -> np.ndarray:
  try:
    return np.load(path, mmap_mode="r", allow_pickle=False)
  except (ValueError, EOFError, OSError) as e:
    if isinstance(e, OSError) and e.errno:
      raise  # A real I/O error: its text names the file.
    raise DatasetFormatError(f"{path}: not a readable .npy array ({str(e)[:120]})") from e


def load_cifar_c(directory: str, corruption: str, severity: int,
                 class_names: tuple[str, ...] | None = None) -> ImageSet:
  """Returns the 10,000 images of one corruption at one severity (memory-mapped)."""
  if severity not in SEVERITIES:
    raise ValueError(f"severity must be one of {SEVERITIES}, got {severity}")
  data_path = os.path.join(directory, f"{corruption}.npy")
  labels_path = os.path.join(directory, "labels.npy")
  for p in (data_path, labels_path):
    if not os.path.isfile(p):
      raise DatasetNotFoundError(f"missing {p} (CIFAR-C layout: <corruption>.npy"
                                 " and labels.npy)")
  images = _load_npy(data_path)
  labels = _load_npy(labels_path)
  if (images.ndim != 4 or images.shape[0] % len(SEVERITIES) or images.shape[-1] != 3
      or images.dtype != np.uint8):
    raise DatasetFormatError(f"{data_path}: expected uint8 [5*n,H,W,3], got"
                             f" {images.dtype} {images.shape}")
  n = images.shape[0] // len(SEVERITIES)
  if labels.ndim != 1 or labels.shape[0] not in (n, images.shape[0]):
    raise DatasetFormatError(f"{labels_path}: labels of shape {labels.shape} for"
                             f" {images.shape[0]} images")
  rows = slice((severity - 1) * n, severity * n)
  lab = labels[rows] if labels.shape[0] == images.shape[0] else labels
  if not np.issubdtype(lab.dtype, np.integer) or lab.size == 0 or int(lab.min()) < 0:
    raise DatasetFormatError(f"{labels_path}: labels must be non-negative integers,"
                             f" got {lab.dtype}")
  num_classes = int(lab.max()) + 1
  names = class_names or tuple(str(i) for i in range(num_classes))
  return ImageSet(np.asarray(images[rows]), np.asarray(lab, dtype=np.int64), names,
                  f"{data_path} [severity {severity}]")
