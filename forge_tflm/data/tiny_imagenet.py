"""Tiny-ImageNet-200 in its own folder layout.

    wnids.txt                      200 class ids
    words.txt                      id -> human-readable names (optional)
    train/<wnid>/images/*.JPEG     500 per class
    val/images/*.JPEG + val/val_annotations.txt (file, wnid, bbox)

Labels index the sorted wnids (the usual ImageFolder convention).
"""

from __future__ import annotations

import os

import numpy as np

from forge_tflm.data import cache
from forge_tflm.data.image_folder import decode_images
from forge_tflm.data.imageset import DatasetFormatError, DatasetNotFoundError, ImageSet


def find_tiny_imagenet(path: str) -> str | None:
  for candidate in (path, os.path.join(path, "tiny-imagenet-200")):
    if os.path.isfile(os.path.join(candidate, "wnids.txt")):
      return candidate
  return None


def _read(path: str) -> bytes:
  with open(path, "rb") as f:
    return f.read()


def _load(root: str, split: str) -> ImageSet:
  with open(os.path.join(root, "wnids.txt")) as f:
    wnids = sorted(w.strip() for w in f if w.strip())
  index = {w: i for i, w in enumerate(wnids)}
  files: list[tuple[int, str]] = []
  if split == "train":
    for wnid in wnids:
      image_dir = os.path.join(root, "train", wnid, "images")
      if not os.path.isdir(image_dir):
        raise DatasetNotFoundError(f"missing {image_dir}")
      files += [(index[wnid], os.path.join(image_dir, n))
                for n in sorted(os.listdir(image_dir))]
  elif split in ("val", "validation", "test"):
    # The official test split has no labels; its validation split is the usual test set.
    annotations = os.path.join(root, "val", "val_annotations.txt")
    if not os.path.isfile(annotations):
      raise DatasetNotFoundError(f"missing {annotations}")
    with open(annotations) as f:
      rows = [(n, line.split("\t")) for n, line in enumerate(f, 1) if line.strip()]
    for n, r in rows:
      if len(r) < 2 or r[1].strip() not in index:
        raise DatasetFormatError(
            f"{annotations}: line {n}: expected '<file>\\t<wnid>\\t...' with a wnid"
            f" from wnids.txt, got {chr(9).join(r).strip()[:80]!r}")
    files = sorted((index[r[1].strip()], os.path.join(root, "val", "images", r[0]))
                   for _, r in rows)
  else:
    raise ValueError(f"Tiny-ImageNet splits are 'train' and 'val', not {split!r}")
  if not files:
    raise DatasetNotFoundError(f"no {split} images in {root}")
  images = decode_images([_read(p) for _, p in files], names=[p for _, p in files])
  labels = np.array([label for label, _ in files], dtype=np.int64)
  return ImageSet(images, labels, tuple(wnids), f"{root} [{split}]")


def load_tiny_imagenet(path: str, split: str, use_cache: bool = True) -> ImageSet:
  root = find_tiny_imagenet(path)
  if root is None:
    raise DatasetNotFoundError(
        f"no Tiny-ImageNet in {path!r} (looked for wnids.txt there and in"
        " tiny-imagenet-200/)")
  key = cache.source_key(os.path.join(root, "wnids.txt"), "tiny_imagenet", split)
  return cache.cached_imageset(key, lambda: _load(root, split), use_cache)
