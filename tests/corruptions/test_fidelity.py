"""Severity-5 corruption strength on CIFAR-10 test images matches the original
generator: mean absolute pixel difference to the clean images within 15% of
what make_cifar_c.py gives on the same copy of the data."""

import functools

import numpy as np
import pytest

from forge_tflm.corruptions import CORRUPTIONS, corrupt
from forge_tflm.corruptions.params import CIFAR10_TEST_SEVERITY5_MAD

from tests.corruptions.test_corruptions import skip_without_frost

TOLERANCE = 0.15
# Default run: every 10th test image (1,000); about a second per corruption.
SUBSET_STRIDE = 10


@functools.lru_cache(maxsize=1)
def _cifar10_test(path):
  from forge_tflm.data import load_dataset  # pylint: disable=import-outside-toplevel
  images = load_dataset("cifar10", "test", path).images
  assert images.shape == (10000, 32, 32, 3), images.shape
  return images


def _check(images, name):
  out = corrupt(images, name, 5, seed=0)
  mad = float(np.abs(out.astype(np.int16) - images.astype(np.int16)).mean())
  target = CIFAR10_TEST_SEVERITY5_MAD[name]
  assert abs(mad - target) <= TOLERANCE * target, (
      f"{name}: MAD {mad:.2f} vs original {target} ({100 * (mad / target - 1):+.1f}%)")


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_severity5_strength_on_subset(shared_cifar10, name):
  skip_without_frost(name)
  _check(_cifar10_test(shared_cifar10)[::SUBSET_STRIDE], name)


@pytest.mark.slow
@pytest.mark.parametrize("name", CORRUPTIONS)
def test_severity5_strength_on_full_test_split(shared_cifar10, name):
  skip_without_frost(name)
  _check(_cifar10_test(shared_cifar10), name)
