"""Bazel build of the FORGE_RECALIB op: `bazel test //custom_ops/forge_recalib:all`.

Runs Debian's Bazel 4.2.3 (`bazel-bootstrap`) fully offline: rules_cc and
rules_java come from the shared third-party snapshots, remote_coverage_tools
is a stub generated here (`bazel test` references it even without coverage),
and @tflite_micro is the TFLM snapshot with esp-tflite-micro's third_party/
headers (the same trees as test_tflm_kernel.py). Bazel's output_user_root is
in the build cache (reused across runs) and no bazel-* symlinks are made in
the repo. Skips when bazel is not installed.
"""

import os
import shutil
import subprocess

import pytest

from tests import third_party
from tests.conftest import REPO_ROOT

_STUB_BUILD = "".join(
    f'filegroup(name = "{name}", srcs = ["noop.sh"], '
    'visibility = ["//visibility:public"])\n'
    for name in ("coverage_report_generator", "lcov_merger", "Main"))


def _coverage_stub() -> str:
  """A remote_coverage_tools repository whose tools do nothing."""
  path = os.path.join(third_party.build_cache(), "bazel_coverage_stub")
  os.makedirs(path, exist_ok=True)
  files = {"WORKSPACE": 'workspace(name = "remote_coverage_tools")\n',
           "BUILD": _STUB_BUILD, "noop.sh": "#!/bin/sh\nexit 0\n"}
  for name, text in files.items():
    with open(os.path.join(path, name), "w") as f:
      f.write(text)
  os.chmod(os.path.join(path, "noop.sh"), 0o755)
  return path


def test_bazel_builds_and_tests_the_op():
  bazel = shutil.which("bazel")
  if bazel is None:
    pytest.skip("bazel not installed (Debian: apt-get install bazel-bootstrap)")
  if not shutil.which("g++"):
    pytest.skip("needs a C/C++ toolchain (g++)")
  tflm_dir = third_party.snapshot("tflite-micro")
  tp_dir = os.path.join(third_party.snapshot("esp-tflite-micro"), "third_party")
  rules_cc = third_party.snapshot("rules_cc")
  rules_java = third_party.snapshot("rules_java")
  cache = third_party.build_cache()
  startup = [bazel, f"--output_user_root={os.path.join(cache, 'bazel')}",
             "--max_idle_secs=60"]  # The server leaves soon if shutdown is missed.
  cmd = startup + [
      "test", "--symlink_prefix=/",  # "/": no bazel-* links in the repo.
      f"--override_repository=rules_cc={rules_cc}",
      f"--override_repository=rules_java={rules_java}",
      f"--override_repository=remote_coverage_tools={_coverage_stub()}",
      f"--repo_env=TFLM_DIR={tflm_dir}", f"--repo_env=TFLM_THIRD_PARTY_DIR={tp_dir}",
      "--jobs=2", "--test_output=errors", "--output_filter=^//custom_ops",
      "//custom_ops/forge_recalib:all"]
  try:
    r = subprocess.run(["nice", "-n", "19"] + cmd, cwd=REPO_ROOT, capture_output=True,
                       text=True, timeout=1500)
  finally:
    subprocess.run(startup + ["shutdown"], cwd=REPO_ROOT, capture_output=True,
                   timeout=120)
  log = r.stdout + r.stderr
  assert r.returncode == 0, log[-6000:]
  for target in ("forge_recalib_core_test", "forge_recalib_kernel_test"):
    assert any(target in line and "PASSED" in line for line in log.splitlines()), log[-6000:]
  assert not any(os.path.basename(p).startswith("bazel-") for p in os.listdir(REPO_ROOT))
