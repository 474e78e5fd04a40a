"""One entry point for every dataset source: `load_dataset(name, split, data_dir)`.

With `data_dir`, the layout is detected (in this order): an image-folder tarball,
CIFAR python pickles, Tiny-ImageNet's folder layout, an image-folder tree
`<data_dir>/<split>/<class>/`, or a directory holding exactly one image-folder
tarball. Without it, tensorflow-datasets is asked, offline (no download).
"""

from __future__ import annotations

import os

from forge_tflm.data.cifar_pickle import find_pickle_dir, load_cifar_pickles
from forge_tflm.data.image_folder import TARBALL_SUFFIXES, is_tarball, load_image_folder
from forge_tflm.data.imageset import DatasetNotFoundError, ImageSet
from forge_tflm.data.tiny_imagenet import find_tiny_imagenet, load_tiny_imagenet

# Names tensorflow-datasets knows, and the split names it uses.
TFDS_NAMES = {"cifar10": "cifar10", "cifar100": "cifar100"}
KNOWN_DATASETS = ("cifar10", "cifar100", "tiny_imagenet")


def _tarballs_in(directory: str) -> list[str]:
  return sorted(os.path.join(directory, n) for n in os.listdir(directory)
                if n.lower().endswith(TARBALL_SUFFIXES))


def load_local(data_dir: str, split: str | None, use_cache: bool = True) -> ImageSet:
  """Loads `split` from a local path in any supported layout."""
  looked = []
  if is_tarball(data_dir):
    return load_image_folder(data_dir, split, use_cache)
  if not os.path.isdir(data_dir):
    raise DatasetNotFoundError(f"dataset path {data_dir!r} does not exist")
  if find_pickle_dir(data_dir):
    return load_cifar_pickles(data_dir, split or "test")
  looked.append("CIFAR pickles (data_batch_1, or train+meta)")
  if find_tiny_imagenet(data_dir):
    return load_tiny_imagenet(data_dir, split or "val", use_cache)
  looked.append("Tiny-ImageNet (wnids.txt)")
  if split and os.path.isdir(os.path.join(data_dir, split)):
    return load_image_folder(data_dir, split, use_cache)
  looked.append(f"an image folder {split or '<split>'}/<class>/")
  tarballs = _tarballs_in(data_dir)
  if len(tarballs) == 1:
    return load_image_folder(tarballs[0], split, use_cache)
  looked.append("exactly one image-folder tarball"
                + (f" (found {len(tarballs)})" if tarballs else ""))
  raise DatasetNotFoundError(
      f"no dataset layout recognised in {data_dir!r}; looked for: " + "; ".join(looked))


def load_tfds(name: str, split: str, tfds_data_dir: str | None = None) -> ImageSet:
  """Loads a prepared tensorflow-datasets dataset without downloading anything."""
  import tensorflow_datasets as tfds  # Heavy import: only when asked for.

  try:
    builder = tfds.builder(name, data_dir=tfds_data_dir)
    ds = builder.as_dataset(split=split, batch_size=-1, shuffle_files=False)
  except Exception as e:  # tfds raises many types for "not there".
    where = tfds_data_dir or os.environ.get("TFDS_DATA_DIR", "~/tensorflow_datasets")
    raise DatasetNotFoundError(
        f"tensorflow-datasets has no prepared {name!r} (split {split!r}) in {where}"
        f" and downloading is off: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    ) from e
  data = tfds.as_numpy(ds)
  names = tuple(builder.info.features["label"].names)
  return ImageSet(data["image"], data["label"].astype("int64"), names,
                  f"tfds:{name} [{split}]")


def load_dataset(name: str, split: str, data_dir: str | None = None,
                 tfds_data_dir: str | None = None, use_cache: bool = True) -> ImageSet:
  """Loads dataset `name` (cifar10, cifar100, tiny_imagenet) split `split`.

  Raises:
    DatasetNotFoundError: naming every place looked at, when nothing is found.
  """
  if name not in KNOWN_DATASETS:
    raise ValueError(f"unknown dataset {name!r}; known: {', '.join(KNOWN_DATASETS)}")
  if data_dir:
    return load_local(data_dir, split, use_cache)
  if name in TFDS_NAMES:
    return load_tfds(TFDS_NAMES[name], split, tfds_data_dir)
  raise DatasetNotFoundError(
      f"{name} is not in tensorflow-datasets; pass its directory (data_dir) holding"
      " wnids.txt, train/ and val/")


def load_tfds_corrupted(corruption: str, severity: int,
                        tfds_data_dir: str | None = None) -> ImageSet:
  """CIFAR-10-C from tensorflow-datasets (`cifar10_corrupted/<corruption>_<severity>`)."""
  return load_tfds(f"cifar10_corrupted/{corruption}_{severity}", "test", tfds_data_dir)

