"""Shared pytest configuration: slow tests are skipped unless --runslow is given."""

import os

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATASETS = os.path.join(os.path.dirname(REPO_ROOT), "shared", "datasets")
SHARED_CIFAR10 = os.path.join(SHARED_DATASETS, "cifar10", "cifar10_jpeg.tar.gz")
# MLPerf Tiny's image-classification ResNet-8 (third party: read, never copied).
SHARED_MLPERF_IC = os.path.join(os.path.dirname(REPO_ROOT), "shared", "models",
                                "mlperf_tiny_ic")


# Fuzz slices: the CI size under CI=true, a quarter of it in a developer's run (as
# Hypothesis' "ci" profile runs more examples), FORGE_FUZZ_SCALE to choose.
FUZZ_SCALE = float(os.environ.get("FORGE_FUZZ_SCALE",
                                  "1" if os.environ.get("CI") == "true" else "0.25"))


def fuzz_slice(ci_size: int) -> int:
  """How many mutants a fuzz test runs where CI runs `ci_size`."""
  return max(1, round(ci_size * FUZZ_SCALE))


def pytest_addoption(parser):
  parser.addoption("--runslow", action="store_true", default=False,
                   help="also run tests marked slow")


# What a test module needs beyond Python, as markers: the fast loop is
# `pytest -n 2 -m "not slow and not emulator and not build"` (fuzz slices scaled: fuzz_slice).
MODULE_MARKS = {
    "emulator": ("deploy/test_cortexm.py", "deploy/test_esp32s3_qemu.py",
                 "deploy/test_esp32s3_idf.py", "deploy/test_esp32s3_mlperf.py",
                 "deploy/test_mlperf_parity.py", "deploy/test_esp32s3_dw_scratch.py",
                 "custom_ops/test_cortexm_variants.py", "custom_ops/test_esp32s3_variants.py"),
    "build": ("deploy/test_host_parity.py", "deploy/test_host_parity_mobilenet.py",
              "deploy/test_firmware.py", "deploy/test_esp32s3_project.py",
              "custom_ops/test_tflm_kernel.py", "custom_ops/test_bazel.py",
              "custom_ops/test_esp_idf_component.py", "custom_ops/test_float_free_prepare.py",
              "custom_ops/test_int_fpu_less.py",
              "custom_ops/test_fuzz_options.py"),  # also fuzz: its harness is C++
    "fuzz": ("runtime/test_fuzz_artifacts.py", "runtime/test_fuzz_manifests.py",
             "converter/test_fuzz_convert.py", "deploy/test_fuzz_deploy_inputs.py",
             "custom_ops/test_fuzz_options.py", "converter/test_fuzz_sites.py",
             "evaluation/test_fuzz_resume.py"),
}


def pytest_collection_modifyitems(config, items):
  tests_dir = os.path.dirname(os.path.abspath(__file__))
  marks: dict[str, list[str]] = {}
  for mark, modules in MODULE_MARKS.items():
    for m in modules:
      marks.setdefault(os.path.join(tests_dir, m), []).append(mark)
  for item in items:
    for mark in marks.get(str(item.path), ()):
      item.add_marker(getattr(pytest.mark, mark))
  if config.getoption("--runslow"):
    return
  skip_slow = pytest.mark.skip(reason="slow test: run with --runslow")
  for item in items:
    if "slow" in item.keywords:
      item.add_marker(skip_slow)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
  """Each test session caches decoded datasets in its own folder, never in ~; the xdist
  workers of one session share it (its writes are atomic), so the splits are decoded
  once per session, not once per worker."""
  if "FORGE_TFLM_CACHE" not in os.environ:
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
      base = base.parent
    monkeypatch.setenv("FORGE_TFLM_CACHE", str(base / "cache"))


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
