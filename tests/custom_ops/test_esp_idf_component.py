"""custom_ops/forge_recalib as an ESP-IDF component and as a plain CMake library.

No ESP-IDF or Xtensa toolchain exists here, so the ESP-IDF side is checked
statically (the component files name existing sources, the manifest pins the
esp-tflite-micro version of the snapshot we test against) and by running the
component's CMakeLists.txt under a stand-in for ESP-IDF's
idf_component_register with the host compiler (the sources, include dirs and
flags of the ESP_PLATFORM branch compile against the esp-tflite-micro
snapshot's TFLM). The non-ESP-IDF branch is configured, built and its ctest
run for real. Build trees live in the build cache.
"""

import hashlib
import os
import re
import shutil
import subprocess

import pytest

from tests import third_party
from tests.conftest import REPO_ROOT

COMPONENT = os.path.join(REPO_ROOT, "custom_ops", "forge_recalib")
TFLM_COMPONENT_VERSION = "1.4.0"  # esp-tflite-micro 99f49e1, our TFLM snapshot's sibling


def _read(name):
  with open(os.path.join(COMPONENT, name)) as f:
    return f.read()



def _cmake_build_dir(name: str) -> str:
  """A build folder per checkout: CMake refuses a cache made from another source
  tree, and a fresh clone (CI) shares the build cache with the developer's tree."""
  tag = hashlib.sha256(REPO_ROOT.encode()).hexdigest()[:8]
  return os.path.join(third_party.build_cache(), f"{name}_{tag}")

def test_component_cmakelists_names_existing_sources():
  text = _read("CMakeLists.txt")
  # The op's sources come from its one list (tests/custom_ops/test_sources.py);
  # the core test is the only source the CMakeLists names itself.
  assert 'file(STRINGS "${CMAKE_CURRENT_LIST_DIR}/sources.txt"' in text
  paths = set(re.findall(r'"?\b((?:src|micro|test)/[\w./]+\.(?:c|cc|h))\b"?', text))
  assert paths == {"test/forge_recalib_core_test.cc"}, paths
  for p in paths:
    assert os.path.isfile(os.path.join(COMPONENT, p)), p
  m = re.search(r"idf_component_register\((.*?)\)", text, re.S)
  assert m, "no idf_component_register call"
  for d in re.search(r"INCLUDE_DIRS\s+(.*)", m.group(1)).group(1).split():
    assert os.path.isdir(os.path.join(COMPONENT, d.strip('"'))), d
  assert "-ffp-contract=off" in text


def test_manifest_pins_the_tested_esp_tflite_micro():
  text = _read("idf_component.yml")
  m = re.search(r"espressif/esp-tflite-micro:\s*\n((?:\s{4}.*\n)+)", text)
  assert m, text
  entry = m.group(1)
  assert re.search(r'version:\s*"==' + re.escape(TFLM_COMPONENT_VERSION) + '"', entry), entry
  assert re.search(r"require:\s*public", entry), entry
  excluded = re.findall(r'^\s+- "([^"]+)"', text.split("exclude:", 1)[1], re.M)
  for p in excluded:  # exclusions name real files (no stale entries)
    assert os.path.exists(os.path.join(COMPONENT, p)), p
  snap = os.path.join(third_party.snapshot("esp-tflite-micro"), "idf_component.yml")
  with open(snap) as f:
    assert re.search(r'^version:\s*"' + re.escape(TFLM_COMPONENT_VERSION) + '"', f.read(), re.M)


def _tflm_dirs():
  tflm = third_party.snapshot("tflite-micro")
  tp = os.path.join(third_party.snapshot("esp-tflite-micro"), "third_party")
  return tflm, tp


def _need(*tools):
  for t in tools:
    if not shutil.which(t):
      pytest.skip(f"needs {t}")


def _run(cmd, **kw):
  r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
  assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
  return r.stdout


def test_plain_cmake_library_builds_and_core_test_passes():
  _need("cmake", "ctest", "g++")
  tflm, tp = _tflm_dirs()
  build = _cmake_build_dir("cmake_forge_recalib")
  _run(["cmake", "-S", COMPONENT, "-B", build, f"-DFORGE_RECALIB_TFLM_DIR={tflm}",
        f"-DFORGE_RECALIB_TFLM_THIRD_PARTY_DIR={tp}", "-DFORGE_RECALIB_BUILD_TESTS=ON"])
  _run(["cmake", "--build", build, "-j2"])
  for lib in ("libforge_recalib_core.a", "libforge_recalib_micro.a"):
    assert os.path.isfile(os.path.join(build, lib)), lib
  assert "100% tests passed" in _run(["ctest", "--test-dir", build, "--output-on-failure"])


# Stand-in for ESP-IDF: idf_component_register makes a static library of the
# component's SRCS/INCLUDE_DIRS (as ESP-IDF does, in ${COMPONENT_LIB}) and
# links the requirement the component manager would inject
# (esp-tflite-micro: its TFLM and third_party/ headers).
_MOCK_IDF_PROJECT = """\
cmake_minimum_required(VERSION 3.16)
project(mock_idf C CXX)
set(CMAKE_CXX_STANDARD 17)
set(ESP_PLATFORM 1)
add_library(esp_tflite_micro INTERFACE)
target_include_directories(esp_tflite_micro SYSTEM INTERFACE
    "{tflm}" "{tp}/flatbuffers/include" "{tp}/gemmlowp" "{tp}/ruy")
target_compile_definitions(esp_tflite_micro INTERFACE TF_LITE_STATIC_MEMORY)
function(idf_component_register)
  cmake_parse_arguments(A "" "" "SRCS;INCLUDE_DIRS;REQUIRES;PRIV_REQUIRES" ${{ARGN}})
  add_library(forge_component STATIC ${{A_SRCS}})
  target_include_directories(forge_component PUBLIC ${{A_INCLUDE_DIRS}})
  target_link_libraries(forge_component PUBLIC esp_tflite_micro)
  target_compile_options(forge_component PRIVATE -Werror)
  set(COMPONENT_LIB forge_component PARENT_SCOPE)
endfunction()
add_subdirectory("{component}" forge_recalib)
"""


def test_esp_idf_branch_compiles_under_a_mock_idf(tmp_path):
  _need("cmake", "g++")
  tflm, tp = _tflm_dirs()
  (tmp_path / "CMakeLists.txt").write_text(
      _MOCK_IDF_PROJECT.format(tflm=tflm, tp=tp, component=COMPONENT))
  build = _cmake_build_dir("cmake_forge_recalib_mock_idf")
  shutil.rmtree(build, ignore_errors=True)  # its source dir is a fresh tmp_path
  _run(["cmake", "-S", str(tmp_path), "-B", build])
  out = _run(["cmake", "--build", build, "-j2", "--verbose"])
  assert os.path.isfile(os.path.join(build, "forge_recalib", "libforge_component.a"))
  compiles = [l for l in out.splitlines() if " -c " in l]
  with open(os.path.join(COMPONENT, "sources.txt")) as f:
    listed = f.read().split()
  assert len(compiles) == len(listed), compiles  # the whole list, variants included
  assert all("-ffp-contract=off" in l for l in compiles), compiles
