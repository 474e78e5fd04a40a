"""The build cache: third-party sources, tool chains and ESP-IDF, from ../shared.

Every firmware build (forge_tflm run-firmware, the tests, the benchmarks) takes its trees
from here. Each tarball in ../shared (or $FORGE_TFLM_SHARED) is checked against its
SHA256SUMS and extracted once into $FORGE_TFLM_BUILD_CACHE (default
~/.cache/forge_tflm/build) through a temporary folder renamed into place, so an
interrupted extraction never leaves half a tree. Nothing lands in the checkout.

A missing piece raises ToolMissing, whose message names what is missing and the command
that provides it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile

from forge_tflm.fileio import file_sha256

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Snapshot name -> tarball in ../shared/third_party (its top folder is the name).
SNAPSHOTS = {
    "tflite-micro": "tflite-micro-90b983c.tar.gz",
    "esp-tflite-micro": "esp-tflite-micro-99f49e1.tar.gz",
    "esp-nn": "esp-nn-d45b843.tar.gz",
    "CMSIS-NN": "CMSIS-NN-4ab83cc.tar.gz",
    "CMSIS_6": "CMSIS_6-5782d6f.tar.gz",
    "rules_cc": "rules_cc-b1c40e1.tar.gz",
    "rules_java": "rules_java-7cf3cef.tar.gz",
}
# Tarball in ../shared/toolchains -> its top folder.
ESP32S3_TOOLS = {"xtensa-esp32s3-elf-gcc12.2.0-toolchain.tar.xz": "xtensa-esp32s3-elf",
                 "qemu-esp32s3-bundle.tar.xz": "qemu-esp32s3"}
ESP32S3_APT = {
    "gcc": "libgmp10 libmpfr6 libmpc3 libisl23 libzstd1",
    "qemu": "libglib2.0-0 libpixman-1-0 libgnutls30 libgcrypt20 libpng16-16 libfdt1 "
            "libslirp0 zlib1g libzstd1 libncursesw6 libtinfo6 libbz2-1.0"}
IDF_TARBALL = "esp-idf-v5.1.7-pruned.tar.xz"
IDF_NEWLIB = "newlib-esp-4.1.0-idf-esp32s3.tar.xz"
IDF_VERSION = "v5.1.7"
# The Python packages ESP-IDF's tools need, pinned (a venv of its own in the cache).
IDF_REQUIREMENTS = os.path.join(REPO_ROOT, "esp32s3_app", "requirements-idf.txt")


class ToolMissing(OSError):
  """A tool or source a build needs is absent or does not run; says how to get it."""


def shared_dir() -> str:
  return os.environ.get("FORGE_TFLM_SHARED", os.path.join(os.path.dirname(REPO_ROOT), "shared"))


def cache_root() -> str:
  """Extracted snapshots and tool chains: shared by every checkout (keyed by tarball)."""
  path = os.environ.get("FORGE_TFLM_BUILD_CACHE", os.path.join(
      os.path.expanduser("~"), ".cache", "forge_tflm", "build"))
  os.makedirs(path, exist_ok=True)
  return path


def build_cache() -> str:
  """This checkout's build objects (reused across runs). Per checkout: the Makefiles
  rebuild on a newer source, so two checkouts sharing objects would link one's objects
  into the other's program."""
  digest = hashlib.sha1(REPO_ROOT.encode()).hexdigest()[:10]
  path = os.path.join(cache_root(), "checkouts", digest)
  os.makedirs(path, exist_ok=True)
  return path


@contextlib.contextmanager
def locked(path: str):
  """An exclusive lock on `path` (pytest-xdist workers, two sessions)."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    yield


def _expected_sha256(folder: str, tarball: str) -> str | None:
  sums = os.path.join(folder, "SHA256SUMS")
  if not os.path.isfile(sums):
    return None
  with open(sums) as f:
    found = {p[1]: p[0] for p in (line.split() for line in f) if len(p) == 2}
  return found.get(tarball)


def _extract_once(src: str, dest: str, top: str, filter_: str) -> str:
  """dest/top, extracted from `src` unless already there (checked against SHA256SUMS)."""
  tree = os.path.join(dest, top)
  if os.path.isdir(tree):
    return tree
  with locked(dest + ".lock"):
    if os.path.isdir(tree):
      return tree
    expected = _expected_sha256(os.path.dirname(src), os.path.basename(src))
    if expected is not None and file_sha256(src) != expected:
      raise OSError(f"{src} does not match its SHA256SUMS entry (a damaged copy)")
    tmp = dest + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(src) as tf:
      tf.extractall(tmp, filter=filter_)
    os.replace(tmp, dest)
  return tree


def shared_file(*parts: str) -> str:
  path = os.path.join(shared_dir(), *parts)
  if not os.path.isfile(path):
    raise ToolMissing(f"needs {path}: the shared material beside the checkout "
                      f"(or set FORGE_TFLM_SHARED to the folder that holds it)")
  return path


def snapshot(name: str) -> str:
  """The extracted tree `name` (a key of SNAPSHOTS)."""
  tarball = SNAPSHOTS[name]
  src = shared_file("third_party", tarball)
  dest = os.path.join(cache_root(), "third_party", tarball[:-len(".tar.gz")])
  return _extract_once(src, dest, name, "data")


def _tool(tarball: str) -> str:
  src = shared_file("toolchains", tarball)
  dest = os.path.join(cache_root(), "toolchains", tarball[:-len(".tar.xz")])
  return _extract_once(src, dest, ESP32S3_TOOLS[tarball], "tar")  # keeps modes


def _runs(exe: str, apt: str) -> None:
  r = subprocess.run([exe, "--version"], capture_output=True, text=True)
  if r.returncode != 0:
    raise ToolMissing(f"{os.path.basename(exe)} does not run (apt-get install -y {apt}): "
                      f"{r.stderr.strip()[:200]}")


def need_programs(*names: str, apt: str) -> None:
  for name in names:
    if shutil.which(name) is None:
      raise ToolMissing(f"needs {name} (apt-get install -y {apt})")


def esp32s3_tools() -> tuple[str, str]:
  """(gcc_prefix, qemu_dir): gcc_prefix as <dir>/bin/xtensa-esp32s3-elf- and qemu_dir with
  bin/qemu-system-xtensa and share/ (the ROM, for -L)."""
  need_programs("make", apt="make")
  gcc_tar, qemu_tar = ESP32S3_TOOLS
  gcc, qemu = _tool(gcc_tar), _tool(qemu_tar)
  prefix = os.path.join(gcc, "bin", "xtensa-esp32s3-elf-")
  _runs(prefix + "gcc", ESP32S3_APT["gcc"])
  _runs(os.path.join(qemu, "bin", "qemu-system-xtensa"), ESP32S3_APT["qemu"])
  return prefix, qemu


def arm_tools() -> None:
  """Bare-metal Cortex-M builds: compilers, newlib's semihosting library, QEMU, make."""
  apt = "gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm make"
  need_programs("arm-none-eabi-gcc", "arm-none-eabi-g++", "qemu-system-arm", "make", apt=apt)
  r = subprocess.run(["arm-none-eabi-gcc", "-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard",
                      "-mfpu=fpv4-sp-d16", "-print-file-name=librdimon.a"],
                     capture_output=True, text=True)
  if not os.path.isabs(r.stdout.strip()):
    raise ToolMissing("needs newlib's librdimon for arm-none-eabi "
                      "(apt-get install -y libnewlib-arm-none-eabi)")


# ------------------------------------------------------------------ ESP-IDF

@dataclasses.dataclass(frozen=True)
class EspIdf:
  """An ESP-IDF installation in the build cache, ready for `idf.py`."""
  idf_path: str
  tools_path: str   # IDF_TOOLS_PATH: the IDF copy of the tool chain, the Python venv
  python: str       # the venv's interpreter (IDF_PYTHON_ENV_PATH/bin/python)
  qemu_dir: str

  def environ(self) -> dict[str, str]:
    env = dict(os.environ)
    bin_dir = os.path.join(self.tools_path, "xtensa-esp32s3-elf", "bin")
    env.update(IDF_PATH=self.idf_path, IDF_TOOLS_PATH=self.tools_path,
               IDF_PYTHON_ENV_PATH=os.path.dirname(os.path.dirname(self.python)),
               # The shared GCC reports 12.2.0, IDF wants esp-12.2.0_20230208: a warning.
               IDF_MAINTAINER="1", IDF_COMPONENT_MANAGER="1",
               PATH=os.pathsep.join([bin_dir, os.path.dirname(self.python), env["PATH"]]))
    env.pop("PYTHONPATH", None)
    return env

  def idf_py(self) -> list[str]:
    return [self.python, os.path.join(self.idf_path, "tools", "idf.py")]


# IDF links crt0/crti/crtn and newlib only; this GCC's default specs are the Xtensa ISS
# simulator's, and crtbegin.o's __dso_handle clashes with IDF's cxx component.
_SPECS = {"startfile": "crt0%O%s crti%O%s", "endfile": "crtn%O%s", "lib": "-lc"}
_LIMITS_WRAP = ("#ifndef _GCC_LIMITS_H_\n#define _GCC_LIMITS_H_\n#ifndef _LIBC_LIMITS_H_\n"
                "#include \"syslimits.h\"\n#endif\n{body}\n#else\n#ifdef _GCC_NEXT_LIMITS_H\n"
                "#include_next <limits.h>\n#endif\n#endif\n")


def _idf_toolchain(dest: str) -> None:
  """A copy of the shared GCC with IDF's newlib over its own, a specs file, wrappers under
  the names IDF calls and GCC's limits.h wrapped as GCC's build normally wraps it."""
  gcc = _tool(next(iter(ESP32S3_TOOLS)))
  newlib = shared_file("toolchains", "esp-idf", IDF_NEWLIB)
  shutil.copytree(gcc, dest, symlinks=True)
  with tarfile.open(newlib) as tf:
    tf.extractall(dest, filter="tar")
  bin_dir = os.path.join(dest, "bin")
  real = os.path.join(dest, "real-bin")
  os.makedirs(real)
  specs = subprocess.run([os.path.join(bin_dir, "xtensa-esp32s3-elf-gcc"), "-dumpspecs"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
  for i, line in enumerate(specs[:-1]):
    key = line[1:-1] if line.startswith("*") and line.endswith(":") else None
    if key in _SPECS:
      specs[i + 1] = _SPECS[key]
  specs_file = os.path.join(dest, "idf.specs")
  with open(specs_file, "w") as f:
    f.write("\n".join(specs) + "\n")
  for tool in ("gcc", "g++", "c++", "cpp"):
    name = f"xtensa-esp32s3-elf-{tool}"
    os.replace(os.path.join(bin_dir, name), os.path.join(real, name))
    with open(os.path.join(bin_dir, name), "w") as f:
      f.write(f'#!/bin/sh\nexec "$(dirname "$0")/../real-bin/{name}" '
              f'-specs="$(dirname "$0")/../idf.specs" "$@"\n')
    os.chmod(os.path.join(bin_dir, name), 0o755)
  fixed = os.path.join(dest, "lib", "gcc", "xtensa-esp32s3-elf", "12.2.0", "include-fixed",
                       "limits.h")
  body = open(fixed).read()
  if "_GCC_LIMITS_H_" not in body:
    with open(fixed, "w") as f:
      f.write(_LIMITS_WRAP.format(body=body))


def _idf_venv(dest: str) -> None:
  if not os.path.isfile(IDF_REQUIREMENTS):
    raise ToolMissing(f"needs {IDF_REQUIREMENTS} (part of the checkout)")
  subprocess.run([sys.executable, "-m", "venv", dest], check=True, capture_output=True)
  r = subprocess.run([os.path.join(dest, "bin", "python"), "-m", "pip", "install", "-q",
                      "--disable-pip-version-check", "-r", IDF_REQUIREMENTS],
                     capture_output=True, text=True)
  if r.returncode != 0:
    raise ToolMissing("could not install ESP-IDF's Python packages from the package index "
                      f"(pip install -r {IDF_REQUIREMENTS}): {r.stderr.strip()[-300:]}")


def esp_idf(progress=None) -> EspIdf:
  """ESP-IDF v5.1.7 from ../shared/toolchains/esp-idf with its tool chain and Python
  packages, prepared once in the build cache (about a minute the first time)."""
  need_programs("cmake", "ninja", apt="cmake ninja-build")
  _, qemu = esp32s3_tools()
  src = shared_file("toolchains", "esp-idf", IDF_TARBALL)
  with open(IDF_REQUIREMENTS, "rb") as f:
    key = hashlib.sha1(f.read() + IDF_TARBALL.encode() + IDF_NEWLIB.encode()).hexdigest()[:10]
  root = os.path.join(cache_root(), "esp-idf", f"{IDF_VERSION}-{key}")
  idf = os.path.join(root, "esp-idf")
  if not os.path.isfile(os.path.join(root, ".complete")):
    with locked(root + ".lock"):
      if not os.path.isfile(os.path.join(root, ".complete")):
        if progress:
          progress(f"preparing ESP-IDF {IDF_VERSION} in {root} (once, about a minute)")
        # Built in place (a venv does not move) and marked complete last.
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(root)
        with tarfile.open(src) as tf:
          tf.extractall(root, filter="tar")
        tools = os.path.join(root, "tools")
        _idf_toolchain(os.path.join(tools, "xtensa-esp32s3-elf"))
        _idf_venv(os.path.join(tools, "python_env"))
        # idf.py's dependency check reads this file; the venv's pins are ours.
        open(os.path.join(tools, "espidf.constraints.v5.1.txt"), "w").close()
        open(os.path.join(root, ".complete"), "w").close()
  tools = os.path.join(root, "tools")
  return EspIdf(idf_path=idf, tools_path=tools,
                python=os.path.join(tools, "python_env", "bin", "python"), qemu_dir=qemu)
