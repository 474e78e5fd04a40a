"""FORGE_RECALIB TFLM kernel: checked-in test vectors are current; kernel test passes.

The kernel test (custom_ops/forge_recalib/micro/forge_recalib_kernel_test.cc)
builds against a tflite-micro source tree given by $TFLM_DIR, with third-party
headers from $TFLM_THIRD_PARTY_DIR (default: TFLM's own
tensorflow/lite/micro/tools/make/downloads). Objects are cached in
$FORGE_TFLM_KERNEL_BUILD_DIR (default ~/.cache/forge_tflm/tflm_kernel_build),
so only the first run compiles the TFLM subset (a few minutes on 2 cores).
"""

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

MICRO_DIR = os.path.join(REPO_ROOT, "custom_ops", "forge_recalib", "micro")
VECTORS = os.path.join(MICRO_DIR, "forge_recalib_test_vectors.h")


def test_checked_in_vectors_match_generator(tmp_path):
  out = tmp_path / "vectors.h"
  r = subprocess.run([sys.executable, os.path.join(MICRO_DIR, "gen_test_vectors.py"),
                      str(out)], capture_output=True, text=True, cwd=REPO_ROOT)
  assert r.returncode == 0, r.stderr
  with open(VECTORS) as f:
    assert out.read_text() == f.read(), (
        "forge_recalib_test_vectors.h is stale: rerun gen_test_vectors.py")


def _third_party_dir(tflm_dir):
  return os.environ.get("TFLM_THIRD_PARTY_DIR", os.path.join(
      tflm_dir, "tensorflow", "lite", "micro", "tools", "make", "downloads"))


def test_tflm_kernel_test_passes():
  tflm_dir = os.environ.get("TFLM_DIR")
  if not tflm_dir:
    pytest.skip("TFLM_DIR not set: needs a tflite-micro source tree "
                "(see custom_ops/forge_recalib/README.md)")
  if not os.path.isfile(os.path.join(tflm_dir, "tensorflow", "lite", "micro",
                                     "micro_interpreter.h")):
    pytest.skip(f"TFLM_DIR={tflm_dir} is not a tflite-micro source tree")
  third_party = _third_party_dir(tflm_dir)
  flexbuffers_h = os.path.join(third_party, "flatbuffers", "include",
                               "flatbuffers", "flexbuffers.h")
  if not os.path.isfile(flexbuffers_h):
    pytest.skip(f"TFLM third-party headers missing ({flexbuffers_h}); set "
                "TFLM_THIRD_PARTY_DIR")
  if not (shutil.which("make") and shutil.which("g++")):
    pytest.skip("make and g++ are needed to build the kernel test")
  build_dir = os.environ.get("FORGE_TFLM_KERNEL_BUILD_DIR", os.path.join(
      os.path.expanduser("~"), ".cache", "forge_tflm", "tflm_kernel_build"))
  r = subprocess.run(
      ["nice", "-n", "19", "make", "-j2", "-C", MICRO_DIR, "test",
       f"TFLM_DIR={tflm_dir}", f"TFLM_THIRD_PARTY_DIR={third_party}",
       f"BUILD_DIR={build_dir}"],
      capture_output=True, text=True, timeout=1800)
  log = r.stdout + r.stderr
  assert r.returncode == 0, log[-6000:]
  assert "~~~ALL TESTS PASSED~~~" in log, log[-6000:]
  assert "failed at" not in log, log[-6000:]
