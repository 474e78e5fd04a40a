"""FORGE_RECALIB TFLM kernel: checked-in test vectors are current; kernel test passes.

The kernel test (custom_ops/forge_recalib/micro/forge_recalib_kernel_test.cc)
builds against a tflite-micro source tree: $TFLM_DIR if set (third-party
headers from $TFLM_THIRD_PARTY_DIR, default TFLM's own
tensorflow/lite/micro/tools/make/downloads), otherwise the TFLM snapshot in
../shared/third_party with the third_party/ headers of the esp-tflite-micro
snapshot (flatbuffers 25.9.23, the version TFLM pins, with TFLM's patch
already applied; checked here). Objects are cached in
$FORGE_TFLM_KERNEL_BUILD_DIR (default <build cache>/tflm_kernel). With the
snapshots the test links the host target's TFLM archive (the Makefile's TFLM_LIB,
built once for run-firmware and the device tests: same tree, same flags), so only
KernelRunner and its fakes compile here.
"""

import os
import shutil
import subprocess
import sys

import pytest

from tests import third_party
from tests.conftest import REPO_ROOT

MICRO_DIR = os.path.join(REPO_ROOT, "custom_ops", "forge_recalib", "micro")
VECTORS = os.path.join(MICRO_DIR, "forge_recalib_test_vectors.h")


def test_checked_in_vectors_match_generator(tmp_path):
  out = tmp_path / "vectors.h"
  r = subprocess.run([sys.executable, "-m", "forge_tflm.testing.c_test_vectors", str(out)],
                     capture_output=True, text=True, cwd=REPO_ROOT)
  assert r.returncode == 0, r.stderr
  with open(VECTORS) as f:
    assert out.read_text() == f.read(), (
        "forge_recalib_test_vectors.h is stale: rerun python -m forge_tflm.testing.c_test_vectors")


def _tflm_patch():
  return os.path.join("tensorflow", "lite", "micro", "tools", "make",
                      "flatbuffers.patch")


def _patched_flatbuffers(third_party_dir, tflm_dir):
  """A third-party dir whose flatbuffers has TFLM's patch applied.

  esp-tflite-micro ships it patched (the patch reverses cleanly); otherwise
  the patch goes onto a copy in the build cache, never onto the snapshot.
  """
  patch = os.path.join(tflm_dir, _tflm_patch())
  flatbuffers = os.path.join(third_party_dir, "flatbuffers")
  if not shutil.which("patch"):
    return third_party_dir  # Cannot check; the build shows any mismatch.
  reverse = subprocess.run(["patch", "-p1", "-R", "--dry-run", "-s", "-f", "-i", patch],
                           cwd=flatbuffers, capture_output=True, text=True)
  if reverse.returncode == 0:
    return third_party_dir
  copy = os.path.join(third_party.build_cache(), "tflm_third_party_patched")
  if not os.path.isdir(copy):
    tmp = copy + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(third_party_dir, tmp, symlinks=True)
    subprocess.run(["patch", "-p1", "-s", "-i", patch],
                   cwd=os.path.join(tmp, "flatbuffers"), check=True)
    os.replace(tmp, copy)
  return copy


def _tflm_tree():
  """(tflm_dir, third_party_dir, make args): $TFLM_DIR, or the shared snapshots (with
  the host target's TFLM archive)."""
  tflm_dir = os.environ.get("TFLM_DIR")
  if tflm_dir:
    if not os.path.isfile(os.path.join(tflm_dir, "tensorflow", "lite", "micro",
                                       "micro_interpreter.h")):
      pytest.skip(f"TFLM_DIR={tflm_dir} is not a tflite-micro source tree")
    return tflm_dir, os.environ.get("TFLM_THIRD_PARTY_DIR", os.path.join(
        tflm_dir, "tensorflow", "lite", "micro", "tools", "make", "downloads")), []
  from forge_tflm.deploy import firmware

  tflm_dir = third_party.snapshot("tflite-micro")
  esp = third_party.snapshot("esp-tflite-micro")
  return (tflm_dir, _patched_flatbuffers(os.path.join(esp, "third_party"), tflm_dir),
          [f"TFLM_LIB={firmware.host_tflm_library()}"])


def test_snapshot_flatbuffers_already_has_tflm_patch():
  """Why the snapshot build needs no patched copy (documents the check)."""
  if not shutil.which("patch"):
    pytest.skip("needs patch(1)")
  tflm_dir = third_party.snapshot("tflite-micro")
  esp_third_party = os.path.join(third_party.snapshot("esp-tflite-micro"), "third_party")
  assert _patched_flatbuffers(esp_third_party, tflm_dir) == esp_third_party


def test_tflm_kernel_test_passes():
  if not (shutil.which("make") and shutil.which("g++")):
    pytest.skip("make and g++ are needed to build the kernel test")
  tflm_dir, third_party_dir, lib_args = _tflm_tree()
  flexbuffers_h = os.path.join(third_party_dir, "flatbuffers", "include",
                               "flatbuffers", "flexbuffers.h")
  if not os.path.isfile(flexbuffers_h):
    pytest.skip(f"TFLM third-party headers missing ({flexbuffers_h}); set "
                "TFLM_THIRD_PARTY_DIR")
  build_dir = os.environ.get("FORGE_TFLM_KERNEL_BUILD_DIR", os.path.join(
      third_party.build_cache(), "tflm_kernel"))
  r = subprocess.run(
      ["nice", "-n", "19", "make", "-j2", "-C", MICRO_DIR, "test",
       f"TFLM_DIR={tflm_dir}", f"TFLM_THIRD_PARTY_DIR={third_party_dir}",
       f"BUILD_DIR={build_dir}", *lib_args],
      capture_output=True, text=True, timeout=1800)
  log = r.stdout + r.stderr
  assert r.returncode == 0, log[-6000:]
  assert "~~~ALL TESTS PASSED~~~" in log, log[-6000:]
  assert "failed at" not in log, log[-6000:]
