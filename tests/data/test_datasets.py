"""Every supported dataset layout, on small generated fixtures and the shared CIFAR-10 copy."""

import os

import numpy as np
import pytest

from forge_tflm import data
from forge_tflm.data import cache
from tests.data import fixtures


def test_cifar10_pickles_match_original_layout(tmp_path):
  d, expected = fixtures.write_cifar10_pickles(str(tmp_path))
  for source in (str(tmp_path), d):  # The parent folder or the pickle folder itself.
    train = data.load_dataset("cifar10", "train", source)
    want = np.concatenate([expected[f"data_batch_{i}"][0] for i in range(1, 6)])
    np.testing.assert_array_equal(train.images, want)
    np.testing.assert_array_equal(
        train.labels, np.concatenate([expected[f"data_batch_{i}"][1] for i in range(1, 6)]))
    assert train.class_names[0] == "airplane" and train.num_classes == 10
  test = data.load_dataset("cifar10", "test", d)
  np.testing.assert_array_equal(test.images, expected["test_batch"][0])
  assert test.labels.dtype == np.int64


def test_cifar100_pickles(tmp_path):
  _, expected = fixtures.write_cifar100_pickles(str(tmp_path))
  test = data.load_dataset("cifar100", "test", str(tmp_path))
  np.testing.assert_array_equal(test.images, expected["test"][0])
  np.testing.assert_array_equal(test.labels, expected["test"][1])
  assert test.num_classes == 100 and test.class_names[7] == "fine7"


def _check_image_folder(result, entries, split):
  want = sorted(((fixtures.CLASSES.index(c), name), img)
                for (s, c, name), img in entries.items() if s == split)
  assert result.class_names == fixtures.CLASSES
  np.testing.assert_array_equal(result.labels, [k[0] for k, _ in want])
  np.testing.assert_array_equal(result.images, np.stack([img for _, img in want]))


def test_image_folder_directory(tmp_path):
  entries = fixtures.image_folder_entries()
  root = fixtures.write_image_folder(str(tmp_path / "folder"), entries)
  for split in ("train", "test"):
    _check_image_folder(data.load_dataset("cifar10", split, root), entries, split)


@pytest.mark.parametrize("prefix", ["", "cifar10/"])
def test_image_folder_tarball(tmp_path, prefix):
  entries = fixtures.image_folder_entries(seed=5)
  tarball = fixtures.write_image_folder_tarball(str(tmp_path / "set.tar.gz"), entries,
                                                prefix)
  _check_image_folder(data.load_dataset("cifar10", "test", tarball), entries, "test")
  # A directory holding exactly one tarball (the layout of ../shared/datasets/cifar10).
  _check_image_folder(data.load_dataset("cifar10", "train", str(tmp_path)), entries,
                      "train")


def test_tarball_decode_is_cached_and_invalidated(tmp_path, monkeypatch):
  monkeypatch.setenv("FORGE_TFLM_CACHE", str(tmp_path / "cache"))
  entries = fixtures.image_folder_entries(per_class=2)
  tarball = fixtures.write_image_folder_tarball(str(tmp_path / "a.tar"), entries)
  first = data.load_dataset("cifar10", "test", tarball)
  assert len(os.listdir(tmp_path / "cache")) == 1
  second = data.load_dataset("cifar10", "test", tarball)
  np.testing.assert_array_equal(first.images, second.images)
  # Rewriting the source (new size/mtime) must not serve the stale decode.
  entries2 = fixtures.image_folder_entries(per_class=3, seed=9)
  os.utime(fixtures.write_image_folder_tarball(tarball, entries2), ns=(1, 1))
  third = data.load_dataset("cifar10", "test", tarball)
  assert len(third) == 9
  _check_image_folder(third, entries2, "test")


def test_damaged_cache_entry_is_rebuilt(tmp_path, monkeypatch):
  monkeypatch.setenv("FORGE_TFLM_CACHE", str(tmp_path / "cache"))
  entries = fixtures.image_folder_entries(per_class=1)
  tarball = fixtures.write_image_folder_tarball(str(tmp_path / "a.tar"), entries)
  data.load_dataset("cifar10", "train", tarball)
  (entry,) = os.listdir(tmp_path / "cache")
  (tmp_path / "cache" / entry).write_bytes(b"not an npz")
  _check_image_folder(data.load_dataset("cifar10", "train", tarball), entries, "train")


def test_tiny_imagenet_layout(tmp_path):
  _, train, val = fixtures.write_tiny_imagenet(str(tmp_path))
  wnids = ("n01", "n02", "n03")  # Sorted, whatever wnids.txt's order.
  for split, expected in (("train", train), ("val", val)):
    result = data.load_dataset("tiny_imagenet", split, str(tmp_path))
    assert result.class_names == wnids
    want = sorted(expected.items(), key=lambda kv: (wnids.index(kv[0][0]), kv[0][1]))
    np.testing.assert_array_equal(result.labels, [wnids.index(k[0]) for k, _ in want])
    np.testing.assert_array_equal(result.images, np.stack([v for _, v in want]))
    assert result.images.shape[1:] == (64, 64, 3)


def test_cifar_c_npy_directory(tmp_path):
  d, arrays, labels = fixtures.write_cifar_c(str(tmp_path))
  assert data.list_corruptions(d) == ["fog", "gaussian_noise"]
  for severity in (1, 3, 5):
    result = data.load_cifar_c(d, "fog", severity)
    n = len(labels)
    np.testing.assert_array_equal(result.images, arrays["fog"][(severity - 1) * n:severity * n])
    np.testing.assert_array_equal(result.labels, labels)
  with pytest.raises(ValueError, match="severity"):
    data.load_cifar_c(d, "fog", 6)
  with pytest.raises(data.DatasetNotFoundError, match="snow.npy"):
    data.load_cifar_c(d, "snow", 1)


def test_missing_local_dataset_names_what_was_looked_for(tmp_path):
  (tmp_path / "empty").mkdir()
  with pytest.raises(data.DatasetNotFoundError) as e:
    data.load_dataset("cifar10", "train", str(tmp_path / "empty"))
  message = str(e.value)
  for what in ("CIFAR pickles", "Tiny-ImageNet", "image folder", "tarball"):
    assert what in message
  with pytest.raises(data.DatasetNotFoundError, match="does not exist"):
    data.load_dataset("cifar10", "train", str(tmp_path / "nope"))


def test_missing_tfds_dataset_is_a_clear_offline_error(tmp_path):
  with pytest.raises(data.DatasetNotFoundError) as e:
    data.load_dataset("cifar10", "test", tfds_data_dir=str(tmp_path))
  assert "tensorflow-datasets" in str(e.value) and "cifar10" in str(e.value)
  assert "downloading is off" in str(e.value)


def test_tiny_imagenet_without_path_says_what_to_pass():
  with pytest.raises(data.DatasetNotFoundError, match="wnids.txt"):
    data.load_dataset("tiny_imagenet", "train")


def test_unknown_dataset_name():
  with pytest.raises(ValueError, match="unknown dataset"):
    data.load_dataset("mnist", "train", "/tmp")


def test_source_key_changes_with_content(tmp_path):
  p = tmp_path / "f"
  p.write_bytes(b"a")
  k1 = cache.source_key(str(p))
  p.write_bytes(b"bb")
  assert cache.source_key(str(p)) != k1


def test_shared_cifar10_copy(shared_cifar10):
  test = data.load_dataset("cifar10", "test", os.path.dirname(shared_cifar10))
  assert test.images.shape == (10000, 32, 32, 3)
  assert test.class_names == ("airplane", "automobile", "bird", "cat", "deer", "dog",
                              "frog", "horse", "ship", "truck")
  np.testing.assert_array_equal(np.bincount(test.labels), [1000] * 10)
  assert np.all(np.diff(test.labels) >= 0)  # Deterministic (label, file) order.
  again = data.load_dataset("cifar10", "test", shared_cifar10)
  np.testing.assert_array_equal(test.images, again.images)
  train = data.load_dataset("cifar10", "train", shared_cifar10)
  assert train.images.shape == (50000, 32, 32, 3)
  np.testing.assert_array_equal(np.bincount(train.labels), [5000] * 10)
