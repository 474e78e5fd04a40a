"""Small generated datasets in every supported on-disk layout."""

from __future__ import annotations

import io
import os
import pickle
import tarfile

import numpy as np
from PIL import Image


def random_images(n: int, size: int = 32, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def encode(image: np.ndarray, fmt: str = "PNG") -> bytes:
  buf = io.BytesIO()
  Image.fromarray(image).save(buf, format=fmt)
  return buf.getvalue()


def write_cifar10_pickles(root: str, per_batch: int = 6, seed: int = 0):
  """Writes cifar-10-batches-py/ like the official archive (bytes keys, CHW rows)."""
  d = os.path.join(root, "cifar-10-batches-py")
  os.makedirs(d)
  rng = np.random.default_rng(seed)
  names = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog",
           b"horse", b"ship", b"truck"]
  with open(os.path.join(d, "batches.meta"), "wb") as f:
    pickle.dump({b"label_names": names, b"num_vis": 3072}, f)
  expected = {}
  for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
    images = random_images(per_batch, seed=int(rng.integers(1 << 30)))
    labels = [int(v) for v in rng.integers(0, 10, per_batch)]
    rows = images.transpose(0, 3, 1, 2).reshape(per_batch, 3072)
    with open(os.path.join(d, name), "wb") as f:
      pickle.dump({b"data": rows, b"labels": labels, b"batch_label": name.encode()}, f)
    expected[name] = (images, np.array(labels))
  return d, expected


def write_cifar100_pickles(root: str, n: int = 8, seed: int = 0):
  d = os.path.join(root, "cifar-100-python")
  os.makedirs(d)
  rng = np.random.default_rng(seed)
  fine = [f"fine{i}".encode() for i in range(100)]
  coarse = [f"coarse{i}".encode() for i in range(20)]
  with open(os.path.join(d, "meta"), "wb") as f:
    pickle.dump({b"fine_label_names": fine, b"coarse_label_names": coarse}, f)
  expected = {}
  for split in ("train", "test"):
    images = random_images(n, seed=int(rng.integers(1 << 30)))
    labels = [int(v) for v in rng.integers(0, 100, n)]
    rows = images.transpose(0, 3, 1, 2).reshape(n, 3072)
    with open(os.path.join(d, split), "wb") as f:
      pickle.dump({b"data": rows, b"fine_labels": labels,
                   b"coarse_labels": [v // 5 for v in labels]}, f)
    expected[split] = (images, np.array(labels))
  return d, expected


CLASSES = ("cat", "dog", "frog")


def image_folder_entries(per_class: int = 4, seed: int = 0):
  """{(split, class, file name): image} with lossless PNGs."""
  entries = {}
  k = 0
  for split in ("train", "test"):
    for c in CLASSES:
      for i in range(per_class):
        entries[(split, c, f"{i:04d}.png")] = random_images(1, seed=seed + k)[0]
        k += 1
  return entries


def write_image_folder(root: str, entries) -> str:
  for (split, c, name), image in entries.items():
    d = os.path.join(root, split, c)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
      f.write(encode(image))
  return root


def write_image_folder_tarball(path: str, entries, prefix: str = "") -> str:
  with tarfile.open(path, "w:gz") as tar:
    # Reverse order: the loader must not depend on archive order.
    for (split, c, name), image in reversed(list(entries.items())):
      data = encode(image)
      info = tarfile.TarInfo(f"{prefix}{split}/{c}/{name}")
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))
  return path


def write_tiny_imagenet(root: str, wnids=("n02", "n01", "n03"), per_class: int = 3,
                        seed: int = 0):
  d = os.path.join(root, "tiny-imagenet-200")
  os.makedirs(os.path.join(d, "val", "images"))
  with open(os.path.join(d, "wnids.txt"), "w") as f:
    f.write("\n".join(wnids) + "\n")
  rng = np.random.default_rng(seed)
  train, val = {}, {}
  rows = []
  for w in wnids:
    os.makedirs(os.path.join(d, "train", w, "images"))
    for i in range(per_class):
      image = random_images(1, 64, int(rng.integers(1 << 30)))[0]
      name = f"{w}_{i}.JPEG"
      with open(os.path.join(d, "train", w, "images", name), "wb") as f:
        f.write(encode(image))  # PNG bytes under a .JPEG name: Pillow sniffs content.
      train[(w, name)] = image
    for i in range(per_class):
      image = random_images(1, 64, int(rng.integers(1 << 30)))[0]
      name = f"val_{w}_{i}.JPEG"
      with open(os.path.join(d, "val", "images", name), "wb") as f:
        f.write(encode(image))
      rows.append(f"{name}\t{w}\t0\t0\t63\t63")
      val[(w, name)] = image
  with open(os.path.join(d, "val", "val_annotations.txt"), "w") as f:
    f.write("\n".join(rows) + "\n")
  return d, train, val


def write_cifar_c(root: str, corruptions=("fog", "gaussian_noise"), n: int = 7,
                  seed: int = 0):
  d = os.path.join(root, "CIFAR-10-C")
  os.makedirs(d)
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, 10, n).astype(np.int64)
  np.save(os.path.join(d, "labels.npy"), np.tile(labels, 5).astype(np.uint8))
  data = {}
  for c in corruptions:
    arr = random_images(5 * n, seed=int(rng.integers(1 << 30)))
    np.save(os.path.join(d, f"{c}.npy"), arr)
    data[c] = arr
  return d, data, labels
