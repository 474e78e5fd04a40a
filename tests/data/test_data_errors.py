"""Damaged datasets fail with one line that names the file (not a traceback, not
`<_io.BytesIO ...>`), through the library and through `forge_tflm eval`."""

import os
import pickle

import numpy as np
import pytest

from forge_tflm import data
from forge_tflm.data import DatasetFormatError
from tests.data import fixtures


def _one_line(e) -> str:
  text = str(e)
  assert "\n" not in text and "_io.BytesIO" not in text, text
  return text


def test_truncated_tarball_names_the_archive(tmp_path):
  tar = fixtures.write_image_folder_tarball(str(tmp_path / "d.tar.gz"),
                                            fixtures.image_folder_entries(2))
  raw = open(tar, "rb").read()
  with open(tar, "wb") as f:
    f.write(raw[: len(raw) // 2])
  with pytest.raises(DatasetFormatError) as e:
    data.load_dataset("cifar10", "test", tar, use_cache=False)
  assert _one_line(e.value).startswith(f"{tar}: damaged or not a tar archive")


def test_garbage_tarball_names_the_archive(tmp_path):
  tar = tmp_path / "d.tar.gz"
  tar.write_bytes(b"this is not a tar archive at all" * 10)
  with pytest.raises(DatasetFormatError) as e:
    data.load_dataset("cifar10", "test", str(tar), use_cache=False)
  assert _one_line(e.value).startswith(f"{tar}: damaged or not a tar archive")


def test_undecodable_image_in_a_folder_names_the_file(tmp_path):
  root = fixtures.write_image_folder(str(tmp_path / "d"), fixtures.image_folder_entries(2))
  bad = os.path.join(root, "test", "dog", "0001.png")
  with open(bad, "wb") as f:
    f.write(b"not a png")
  with pytest.raises(DatasetFormatError) as e:
    data.load_dataset("cifar10", "test", root)
  text = _one_line(e.value)
  assert text.startswith(f"{bad}: cannot decode it as an image"), text


def test_undecodable_image_in_a_tarball_names_archive_and_member(tmp_path):
  import io
  import tarfile
  path = str(tmp_path / "d.tar")
  with tarfile.open(path, "w") as tar:
    for name, payload in (("test/cat/a.png", fixtures.encode(fixtures.random_images(1)[0])),
                          ("test/cat/b.png", b"\x89PNG broken")):
      info = tarfile.TarInfo(name)
      info.size = len(payload)
      tar.addfile(info, io.BytesIO(payload))
  with pytest.raises(DatasetFormatError) as e:
    data.load_dataset("cifar10", "test", path, use_cache=False)
  assert _one_line(e.value).startswith(f"{path}:test/cat/b.png: cannot decode")


def test_mixed_image_sizes_name_the_odd_file(tmp_path):
  entries = fixtures.image_folder_entries(2)
  entries[("test", "frog", "0001.png")] = fixtures.random_images(1, size=28)[0]
  root = fixtures.write_image_folder(str(tmp_path / "d"), entries)
  with pytest.raises(DatasetFormatError) as e:
    data.load_dataset("cifar10", "test", root)
  text = _one_line(e.value)
  assert text.startswith(os.path.join(root, "test", "frog", "0001.png") + ": 28x28"), text


def test_corrupt_cifar_pickle_names_the_file(tmp_path):
  d, _ = fixtures.write_cifar10_pickles(str(tmp_path))
  with open(os.path.join(d, "test_batch"), "wb") as f:
    f.write(b"\x80\x04garbage")
  with pytest.raises(DatasetFormatError) as e:
    data.load_dataset("cifar10", "test", d)
  assert _one_line(e.value).startswith(f"{os.path.join(d, 'test_batch')}: not a CIFAR pickle")
  with open(os.path.join(d, "test_batch"), "wb") as f:
    pickle.dump({b"data": np.zeros((2, 3072), np.uint8)}, f)  # No labels.
  with pytest.raises(DatasetFormatError, match="test_batch: no 'labels' entry"):
    data.load_dataset("cifar10", "test", d)


def test_corrupt_cifar_c_npy_names_the_file(tmp_path):
  d, _, _ = fixtures.write_cifar_c(str(tmp_path))
  path = os.path.join(d, "fog.npy")
  with open(path, "wb") as f:
    f.write(b"\x93NUMPY garbage")
  with pytest.raises(DatasetFormatError) as e:
    data.load_cifar_c(d, "fog", 1)
  assert _one_line(e.value).startswith(f"{path}: not a readable .npy array")
  np.save(os.path.join(d, "labels.npy"), np.zeros((3, 2)))
  with pytest.raises(DatasetFormatError, match="labels.npy: labels of shape"):
    data.load_cifar_c(d, "gaussian_noise", 1)


def test_tiny_imagenet_unknown_wnid_names_file_and_line(tmp_path):
  d, _, _ = fixtures.write_tiny_imagenet(str(tmp_path))
  ann = os.path.join(d, "val", "val_annotations.txt")
  with open(ann, "a") as f:
    f.write("val_x.JPEG\tn99\t0\t0\t63\t63\n")
  with pytest.raises(DatasetFormatError) as e:
    data.load_dataset("tiny_imagenet", "val", d, use_cache=False)
  assert _one_line(e.value).startswith(f"{ann}: line 10:"), str(e.value)
