"""The unmodified third-party source snapshots in ../shared/third_party, extracted once.

Tests that build TFLite-Micro, ESP-NN, CMSIS-NN or Bazel rules take their trees from
here. Each tarball is checked against SHA256SUMS and extracted into
$FORGE_TFLM_BUILD_CACHE (default ~/.cache/forge_tflm/build) under its own name, through
a temporary folder renamed into place, so a crashed extraction never leaves half a
tree; later runs (and later tests in the same run) reuse it. Nothing lands in the repo.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tarfile

import pytest

from forge_tflm.fileio import file_sha256

from tests.conftest import REPO_ROOT

SHARED_THIRD_PARTY = os.path.join(os.path.dirname(REPO_ROOT), "shared", "third_party")

# Snapshot name -> (tarball, top-level folder inside it).
SNAPSHOTS = {
    "tflite-micro": "tflite-micro-90b983c.tar.gz",
    "esp-tflite-micro": "esp-tflite-micro-99f49e1.tar.gz",
    "esp-nn": "esp-nn-d45b843.tar.gz",
    "CMSIS-NN": "CMSIS-NN-4ab83cc.tar.gz",
    "CMSIS_6": "CMSIS_6-5782d6f.tar.gz",
    "rules_cc": "rules_cc-b1c40e1.tar.gz",
    "rules_java": "rules_java-7cf3cef.tar.gz",
}


def _cache_root() -> str:
  """Extracted snapshots and toolchains: shared by every checkout (keyed by tarball)."""
  path = os.environ.get("FORGE_TFLM_BUILD_CACHE", os.path.join(
      os.path.expanduser("~"), ".cache", "forge_tflm", "build"))
  os.makedirs(path, exist_ok=True)
  return path


def build_cache() -> str:
  """Where this checkout's build objects live (reused across runs). Per checkout: the
  Makefiles rebuild on a newer source, so two checkouts sharing objects would link one's
  objects into the other's program."""
  digest = hashlib.sha1(REPO_ROOT.encode()).hexdigest()[:10]
  path = os.path.join(_cache_root(), "checkouts", digest)
  os.makedirs(path, exist_ok=True)
  return path


def _expected_sha256(tarball: str) -> str | None:
  sums = os.path.join(SHARED_THIRD_PARTY, "SHA256SUMS")
  if not os.path.isfile(sums):
    return None
  with open(sums) as f:
    for line in f:
      parts = line.split()
      if len(parts) == 2 and parts[1] == tarball:
        return parts[0]
  return None


def snapshot(name: str) -> str:
  """Path of the extracted tree `name` (a key of SNAPSHOTS); skips the test if absent."""
  tarball = SNAPSHOTS[name]
  src = os.path.join(SHARED_THIRD_PARTY, tarball)
  if not os.path.isfile(src):
    pytest.skip(f"needs {src} (the third-party snapshots beside the checkout)")
  root = os.path.join(_cache_root(), "third_party")
  os.makedirs(root, exist_ok=True)
  stem = tarball[:-len(".tar.gz")]
  dest = os.path.join(root, stem)
  tree = os.path.join(dest, name)
  if os.path.isdir(tree):
    return tree
  with open(os.path.join(root, f".{stem}.lock"), "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)  # pytest-xdist or two sessions: extract once.
    if os.path.isdir(tree):
      return tree
    expected = _expected_sha256(tarball)
    if expected is not None and file_sha256(src) != expected:
      raise RuntimeError(f"{src} does not match its SHA256SUMS entry")
    tmp = dest + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(src) as tf:
      tf.extractall(tmp, filter="data")
    os.replace(tmp, dest)
  return tree


def missing_arm_tools() -> str | None:
  """Why bare-metal Cortex-M builds cannot run here (compilers, newlib's semihosting
  library, QEMU, make), or None."""
  for tool in ("arm-none-eabi-gcc", "arm-none-eabi-g++", "qemu-system-arm", "make"):
    if shutil.which(tool) is None:
      return (f"needs {tool} (apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi "
              f"qemu-system-arm make)")
  r = subprocess.run(["arm-none-eabi-gcc", "-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard",
                      "-mfpu=fpv4-sp-d16", "-print-file-name=librdimon.a"],
                     capture_output=True, text=True)
  if not os.path.isabs(r.stdout.strip()):
    return "needs newlib's librdimon for arm-none-eabi (apt-get install libnewlib-arm-none-eabi)"
  return None


# ------------------------------------------------ ESP32-S3 toolchain + emulator

SHARED_TOOLCHAINS = os.path.join(os.path.dirname(REPO_ROOT), "shared", "toolchains")
# Tarball -> top-level folder inside it (../shared/toolchains/README.md).
ESP32S3_TOOLS = {"xtensa-esp32s3-elf-gcc12.2.0-toolchain.tar.xz": "xtensa-esp32s3-elf",
                 "qemu-esp32s3-bundle.tar.xz": "qemu-esp32s3"}
ESP32S3_APT = {
    "gcc": "libgmp10 libmpfr6 libmpc3 libisl23 libzstd1",
    "qemu": "libglib2.0-0 libpixman-1-0 libgnutls30 libgcrypt20 libpng16-16 libfdt1 "
            "libslirp0 zlib1g libzstd1 libncursesw6 libtinfo6 libbz2-1.0"}


def _extract_tool(tarball: str) -> str | None:
  """Extracts ../shared/toolchains/<tarball> once (checked against SHA256SUMS) into
  the build cache's toolchains/<stem>; returns its top-level folder, None if absent."""
  src = os.path.join(SHARED_TOOLCHAINS, tarball)
  if not os.path.isfile(src):
    return None
  root = os.path.join(_cache_root(), "toolchains")
  os.makedirs(root, exist_ok=True)
  stem = tarball[:-len(".tar.xz")]
  dest = os.path.join(root, stem)
  tree = os.path.join(dest, ESP32S3_TOOLS[tarball])
  if os.path.isdir(tree):
    return tree
  with open(os.path.join(root, f".{stem}.lock"), "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if os.path.isdir(tree):
      return tree
    sums = os.path.join(SHARED_TOOLCHAINS, "SHA256SUMS")
    with open(sums) as f:
      expected = {p[1]: p[0] for p in (l.split() for l in f) if len(p) == 2}
    if tarball in expected and file_sha256(src) != expected[tarball]:
      raise RuntimeError(f"{src} does not match its SHA256SUMS entry")
    tmp = dest + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(src) as tf:  # Executables keep their modes (filter="tar").
      tf.extractall(tmp, filter="tar")
    os.replace(tmp, dest)
  return tree


def esp32s3_tools() -> tuple[str | None, str]:
  """(None, why) when the ESP32-S3 toolchain or emulator cannot run here, else
  (gcc_prefix, qemu_dir): gcc_prefix as <dir>/bin/xtensa-esp32s3-elf- and qemu_dir
  with bin/qemu-system-xtensa and share/ (the ROM, for -L)."""
  if shutil.which("make") is None:
    return None, "needs make"
  gcc_tar, qemu_tar = ESP32S3_TOOLS
  gcc, qemu = _extract_tool(gcc_tar), _extract_tool(qemu_tar)
  if gcc is None or qemu is None:
    return None, f"needs {SHARED_TOOLCHAINS}/{gcc_tar} and {qemu_tar}"
  prefix = os.path.join(gcc, "bin", "xtensa-esp32s3-elf-")
  checks = ((prefix + "gcc", ["--version"], "gcc"),
            (os.path.join(qemu, "bin", "qemu-system-xtensa"), ["--version"], "qemu"))
  for exe, args, key in checks:
    r = subprocess.run([exe] + args, capture_output=True, text=True)
    if r.returncode != 0:
      return None, (f"{os.path.basename(exe)} does not run (apt-get install -y "
                    f"{ESP32S3_APT[key]}): {r.stderr.strip()[:200]}")
  return prefix, qemu
