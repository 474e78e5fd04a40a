"""Shared pytest configuration: slow tests are skipped unless --runslow is given."""

import os

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATASETS = os.path.join(os.path.dirname(REPO_ROOT), "shared", "datasets")
SHARED_CIFAR10 = os.path.join(SHARED_DATASETS, "cifar10", "cifar10_jpeg.tar.gz")
# MLPerf Tiny's image-classification ResNet-8 (third party: read, never copied).
SHARED_MLPERF_IC = os.path.join(os.path.dirname(REPO_ROOT), "shared", "models",
                                "mlperf_tiny_ic")


def pytest_addoption(parser):
  parser.addoption("--runslow", action="store_true", default=False,
                   help="also run tests marked slow")


def pytest_collection_modifyitems(config, items):
  if config.getoption("--runslow"):
    return
  skip_slow = pytest.mark.skip(reason="slow test: run with --runslow")
  for item in items:
    if "slow" in item.keywords:
      item.add_marker(skip_slow)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
  """Each test session caches decoded datasets in its own folder, never in ~."""
  if "FORGE_TFLM_CACHE" not in os.environ:
    monkeypatch.setenv("FORGE_TFLM_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture
def shared_mlperf_ic():
  if not os.path.exists(os.path.join(SHARED_MLPERF_IC, "pretrainedResnet_quant.tflite")):
    pytest.skip(f"needs MLPerf Tiny's ResNet-8 at {SHARED_MLPERF_IC} (not present)")
  return SHARED_MLPERF_IC


@pytest.fixture
def shared_cifar10():
  if not os.path.exists(SHARED_CIFAR10):
    pytest.skip(f"needs the CIFAR-10 JPEG copy at {SHARED_CIFAR10} (not present)")
  return SHARED_CIFAR10
