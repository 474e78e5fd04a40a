"""Image-folder datasets: `<root>/<split>/<class>/<image>`, as a directory or a tarball.

Classes are the sorted sub-folder names (the torchvision ImageFolder rule; for
CIFAR-10 this is also the original label order). Images are ordered by
(label, file name), so every load gives the same order.
"""

from __future__ import annotations

import io
import concurrent.futures
import os
import tarfile
from typing import Iterable, Sequence

import numpy as np
from PIL import Image

from forge_tflm.data import cache
from forge_tflm.data.imageset import DatasetFormatError, DatasetNotFoundError, ImageSet

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".webp")
TARBALL_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")

_PARALLEL_THRESHOLD = 2000  # Below this, process start-up costs more than it saves.


def is_tarball(path: str) -> bool:
  return os.path.isfile(path) and path.lower().endswith(TARBALL_SUFFIXES)


def _is_image(name: str) -> bool:
  return name.lower().endswith(IMAGE_EXTENSIONS)


def decode_image(data: bytes, name: str | None = None) -> np.ndarray:
  """One encoded image -> uint8 [H,W,3]; `name` (its file) is what errors cite."""
  try:
    with Image.open(io.BytesIO(data)) as im:
      return np.asarray(im.convert("RGB"), dtype=np.uint8)
  except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
    # Pillow's own text names only the in-memory buffer (<_io.BytesIO ...>).
    reason = " ".join(str(e).split(" <_io.BytesIO")[0].split()) or type(e).__name__
    raise DatasetFormatError(f"{name or 'image'}: cannot decode it as an image"
                             f" ({reason})") from e


def _decode_chunk(blobs: Sequence[bytes], names: Sequence[str | None]) -> np.ndarray:
  images = [decode_image(b, n) for b, n in zip(blobs, names)]
  _check_sizes(images, names)
  return np.stack(images)


def _check_sizes(images: Sequence[np.ndarray], names: Sequence[str | None]) -> None:
  first = images[0].shape
  for image, name in zip(images, names):
    if image.shape != first:
      raise DatasetFormatError(
          f"{name or 'an image'}: {image.shape[1]}x{image.shape[0]} pixels, but"
          f" {names[0] or 'the first image'} is {first[1]}x{first[0]}: all images of a"
          " dataset must be the same size")


def decode_images(blobs: Sequence[bytes], workers: int | None = None,
                  names: Sequence[str] | None = None) -> np.ndarray:
  """Decodes encoded images (all the same size) into one uint8 array.

  names: each blob's file, for error messages (a damaged or odd-sized image).
  """
  if not blobs:
    raise ValueError("no images to decode")
  names = list(names) if names is not None else [None] * len(blobs)
  workers = workers or os.cpu_count() or 1
  if workers == 1 or len(blobs) < _PARALLEL_THRESHOLD:
    return _decode_chunk(blobs, names)
  n_chunks = workers * 4
  bounds = np.linspace(0, len(blobs), n_chunks + 1).astype(int)
  spans = [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
  # Pillow's JPEG/PNG decoders release the GIL, so threads scale and avoid
  # the start-up and pickling cost (and fork-safety issues) of processes.
  with concurrent.futures.ThreadPoolExecutor(workers) as pool:
    parts = list(pool.map(lambda s: _decode_chunk(blobs[s[0]:s[1]], names[s[0]:s[1]]),
                          spans))
  _check_sizes([p[0] for p in parts], [names[a] for a, _ in spans])
  return np.concatenate(parts)


def _build(entries: Iterable[tuple[str, str, bytes, str]], description: str) -> ImageSet:
  """entries: (class_name, file_name, encoded bytes, where: the file errors cite)."""
  entries = list(entries)
  if not entries:
    raise DatasetNotFoundError(f"no images found in {description}")
  class_names = tuple(sorted({e[0] for e in entries}))
  index = {c: i for i, c in enumerate(class_names)}
  entries.sort(key=lambda e: (index[e[0]], e[1]))
  images = decode_images([e[2] for e in entries], names=[e[3] for e in entries])
  labels = np.array([index[e[0]] for e in entries], dtype=np.int64)
  return ImageSet(images, labels, class_names, description)


def _read_directory(root: str) -> list[tuple[str, str, bytes, str]]:
  entries = []
  for class_name in sorted(os.listdir(root)):
    class_dir = os.path.join(root, class_name)
    if not os.path.isdir(class_dir):
      continue
    for dirpath, _, files in os.walk(class_dir):
      for name in files:
        if _is_image(name):
          path = os.path.join(dirpath, name)
          with open(path, "rb") as f:
            entries.append((class_name, os.path.relpath(path, class_dir), f.read(), path))
  return entries


def _read_tarball(path: str, split: str | None) -> list[tuple[str, str, bytes, str]]:
  """Reads `[<prefix>/]<split>/<class>/<file>` members; `prefix` may be absent."""
  import lzma
  import zlib

  entries = []
  try:
    with tarfile.open(path) as tar:
      for member in tar:
        if not member.isfile() or not _is_image(member.name):
          continue
        parts = [p for p in member.name.split("/") if p not in ("", ".")]
        if split is None:
          if len(parts) < 2:
            continue
          class_name, rel = parts[-2], parts[-1]
        else:
          head = parts[:-2]  # The split folder sits above <class>/<file>.
          if split not in head:
            continue
          i = len(head) - 1 - head[::-1].index(split)
          class_name, rel = parts[i + 1], "/".join(parts[i + 2:])
        data = tar.extractfile(member).read()
        entries.append((class_name, rel, data, f"{path}:{member.name}"))
  except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, OSError) as e:
    if isinstance(e, OSError) and e.errno:
      raise  # A real I/O error (permissions, ...): its text names the file.
    reason = " ".join(str(e).replace(":\n- ", ": ").replace("\n- ", "; ").split())
    raise DatasetFormatError(f"{path}: damaged or not a tar archive"
                             f" ({reason or type(e).__name__})") from e
  return entries


def load_image_folder(path: str, split: str | None, use_cache: bool = True) -> ImageSet:
  """Loads `path/<split>/<class>/*` (directory) or the same layout inside a tarball.

  With `split=None` the class folders are directly under `path`.
  """
  if is_tarball(path):
    description = f"{path} [{split}]" if split else path
    key = cache.source_key(path, "image_folder", split or "")
    return cache.cached_imageset(
        key, lambda: _build(_read_tarball(path, split), description), use_cache)
  root = os.path.join(path, split) if split else path
  if not os.path.isdir(root):
    raise DatasetNotFoundError(f"image folder {root!r} does not exist")
  return _build(_read_directory(root), root)
