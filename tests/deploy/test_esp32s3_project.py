"""esp32s3_app's ESP-IDF project compiles the same app as the CI targets (fast checks;
tests/deploy/test_esp32s3_idf.py builds it with ESP-IDF and runs it). What is checked:

  - the app's sources: the ESP-IDF main component compiles core/sources.txt plus
    main.cc and esp32s3_platform.cc (markers, cycle counter, console, arena) and
    nothing else, and requires the forge_controller component; the host and
    Cortex-M Makefiles compile exactly core/sources.txt, the controller's
    sources.txt and their own main (read from `make -n`);
  - main.cc holds only app_main;
  - main.cc and esp32s3_platform.cc compile (-fsyntax-only) against TFLM and the
    exported arrays, with declarations of the ESP-IDF APIs they call
    (tests/deploy/idf_stubs, signatures as in ESP-IDF v5);
  - the pinned esp-tflite-micro is the snapshot the CI's ESP-NN host target uses.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from tests import third_party
from tests.conftest import REPO_ROOT
from tests.deploy import test_cortexm as cm
from tests.deploy import test_host_parity as host

APP = os.path.join(REPO_ROOT, "esp32s3_app")
CONTROLLER = os.path.join(REPO_ROOT, "custom_ops", "forge_controller")
MAIN = os.path.join(APP, "main")
STUBS = os.path.join(REPO_ROOT, "tests", "deploy", "idf_stubs")


def _sources(folder: str) -> list[str]:
  with open(os.path.join(folder, "sources.txt")) as f:
    return [line.strip() for line in f if line.strip()]


def _core_sources() -> list[str]:
  return _sources(os.path.join(APP, "core"))


def _compiled_app_sources(make_args: list[str], goals: list[str]) -> set[str]:
  """The esp32s3_app/ and controller sources `make -n -B` would compile, relative to the
  repository."""
  r = subprocess.run(["make", "-n", "-B"] + goals + make_args, capture_output=True,
                     text=True)
  assert r.returncode == 0, r.stderr[-3000:]
  found = set()
  for src in re.findall(r"-c (\S+\.cc?)\b", r.stdout):
    path = os.path.normpath(src)
    if path.startswith((APP + os.sep, CONTROLLER + os.sep)):
      found.add(os.path.relpath(path, REPO_ROOT))
  return found


def test_core_sources_list_every_core_file():
  on_disk = sorted(f for f in os.listdir(os.path.join(APP, "core")) if f.endswith((".cc", ".c")))
  assert sorted(_core_sources()) == on_disk
  src = os.path.join(CONTROLLER, "src")
  assert sorted(_sources(CONTROLLER)) == sorted(f for f in os.listdir(src) if f.endswith(".c"))


def test_idf_main_component_compiles_the_core_and_its_own_two_files():
  text = open(os.path.join(MAIN, "CMakeLists.txt")).read()
  srcs = re.search(r"SRCS (.*?)\n", text).group(1).split()
  assert srcs == ['"main.cc"', '"esp32s3_platform.cc"', "${core_srcs}",
                  '"${generated}/forge_app_data.cc"']
  assert "../core/sources.txt" in text
  assert re.search(r"PRIV_REQUIRES [^)]*\bforge_controller\b", text)
  sources = sorted(f for f in os.listdir(MAIN) if f.endswith((".cc", ".c", ".cpp")))
  assert sources == ["esp32s3_platform.cc", "main.cc"]


@pytest.mark.parametrize("target", ["host", "cortexm"])
def test_ci_targets_compile_the_same_core(target):
  if shutil.which("make") is None:
    pytest.skip("needs make")
  if target == "host":
    tflm, esp = third_party.snapshot("tflite-micro"), third_party.snapshot("esp-tflite-micro")
    args = ["-C", os.path.join(APP, "host"), "KERNELS=reference", f"TFLM_DIR={tflm}",
            f"THIRD_PARTY={os.path.join(esp, 'third_party')}", "BUILD_DIR=/nonexistent"]
    main = "esp32s3_app/host/host_main.cc"
    goals = ["all"]
  else:
    args = ["-C", os.path.join(APP, "cortexm")] + cm._make_args("an386")
    args = [a if not a.startswith("BUILD_DIR=") else "BUILD_DIR=/nonexistent" for a in args]
    main = "esp32s3_app/cortexm/cortexm_main.cc"
    goals = ["lib"]
  compiled = _compiled_app_sources(args, goals)
  core = {f"esp32s3_app/core/{name}" for name in _core_sources()}
  core |= {f"custom_ops/forge_controller/src/{name}" for name in _sources(CONTROLLER)}
  assert compiled - {"esp32s3_app/cortexm/startup.c"} == core | {main}, compiled


def test_main_cc_holds_only_app_main():
  text = open(os.path.join(MAIN, "main.cc")).read()
  code = re.sub(r"//[^\n]*|#[^\n]*", "", text)
  defs = re.findall(r"\b(\w+)\s*\([^;{)]*\)\s*\{", code)
  assert [d for d in defs if d not in ("if", "for", "while", "switch")] == ["app_main"]


def test_app_sources_compile_against_tflm_and_idf_declarations(tmp_path):
  from forge_tflm import deploy

  if shutil.which("g++") is None:
    pytest.skip("needs g++")
  gen = tmp_path / "generated"
  deploy.write_c_arrays(str(gen), b"\0" * 16, np.zeros((1, 4), np.int8),
                        command="forge_tflm export-firmware (test)", arena_bytes=131072)
  tflm = third_party.snapshot("tflite-micro")
  tp = os.path.join(third_party.snapshot("esp-tflite-micro"), "third_party")
  forge = os.path.join(REPO_ROOT, "custom_ops", "forge_recalib")
  for src in ("main.cc", "esp32s3_platform.cc"):
    r = subprocess.run(
        ["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
         "-DTF_LITE_STATIC_MEMORY", "-DESP_NN=1", f"-I{STUBS}", f"-I{MAIN}",
         f"-I{os.path.join(APP, 'core')}", f"-I{CONTROLLER}/src", f"-I{gen}",
         f"-I{forge}/src", f"-I{forge}/micro",
         "-isystem", tflm, "-isystem", f"{tp}/flatbuffers/include", "-isystem",
         f"{tp}/gemmlowp", "-isystem", f"{tp}/ruy", os.path.join(MAIN, src)],
        capture_output=True, text=True)
    assert r.returncode == 0, f"{src}:\n{r.stderr[-3000:]}"


def test_idf_component_pins_the_snapshot_the_ci_targets_use():
  text = open(os.path.join(MAIN, "idf_component.yml")).read()
  pin = re.search(r'espressif/esp-tflite-micro:\s*"==([\d.]+)"', text).group(1)
  snap = third_party.snapshot("esp-tflite-micro")
  with open(os.path.join(snap, "idf_component.yml")) as f:
    version = re.search(r"^version:\s*\"?([\d.]+)", f.read(), re.M).group(1)
  assert pin == version == "1.4.0"
  op = open(os.path.join(REPO_ROOT, "custom_ops", "forge_recalib", "idf_component.yml")).read()
  assert '"==1.4.0"' in op


def test_esp_nn_builds_register_the_esp_nn_fully_connected_unguarded():
  """No FC guard (docs/decisions/esp-nn-fc-guard.md): every build registers TFLM's
  FULLY_CONNECTED, which ESP-NN builds resolve to esp-tflite-micro's ESP-NN adapter."""
  text = open(os.path.join(APP, "core", "forge_app.cc")).read()
  assert "Guarded" not in text and "fc_guard" not in text
  assert "AddFullyConnected(Wrap<6>(tflite::Register_FULLY_CONNECTED()))" in text
  assert not os.path.exists(os.path.join(APP, "core", "esp_nn_fc_guard.h"))
  assert host.TARGETS == ("reference", "esp_nn")
