"""MLPerf Tiny's ResNet-8, converted from the int8 .tflite it ships as (issue 35), runs
bit-exactly on every device target: forge_tflm verify-device says BIT-EXACT.

The shared model (../shared/models/mlperf_tiny_ic/pretrainedResnet_quant.tflite, raw
0..255 pixels) is converted with `forge_tflm convert --input_range=0,255
--calibration_size=200` (FORGE at its 9 convs, targets measured on the calibration
images; cached in the build cache keyed by model + converter sources). Its builtins
are not ResNet-20's (AVERAGE_POOL_2D, RESHAPE, SOFTMAX with an int8 output of scale
1/256), so the targets are built with OPS = exactly the model's builtins, in the
ResNet-20 builds' folders (the Makefiles keep what depends on OPS apart). What a user ships, per
target: `forge_tflm export-firmware` (gaussian_noise-5 images, FORGE adapting,
expected.json with every op's checksum) -> the C arrays linked in -> the run's log
-> `forge_tflm verify-device`, which must pass every image: the softmax output
(printed as the logits), the prediction, every op's output checksum, every FORGE op's
output and float32 state.

  host, TFLM reference kernels  N_IMAGES (200) images, `make embedded`
  host, ESP-NN's _ansi kernels  the same images and expected.json
  Cortex-M4F (qemu mps2-an386)  BOARD_IMAGES["an386"] (200), CMSIS-NN DSP path

The model's own op set adds only its kernels and the app to the ResNet-20 builds (one
build folder per target); the verdicts of the last full run are committed in
benchmarks/results/mlperf_device_parity.txt. Skips (with the reason) without the shared
model, CIFAR-10, gcc, or the Arm tools.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time

import pytest

from forge_tflm.deploy.targets import cached_conversion
from tests.conftest import SHARED_MLPERF_IC
from tests.deploy import test_cortexm as cm
from tests.deploy.test_host_parity import (DATA_DIR, N_IMAGES, TARGETS, _dataset_cache,
                                           _make)

MODEL = os.path.join(SHARED_MLPERF_IC, "pretrainedResnet_quant.tflite")
N_SITES = 9  # every CONV_2D of ResNet-8
# The Cortex-M4F (issue 35's target). The M55 (cm.BOARDS' an547) would add a cold
# build of its own op set (~5 min on 2 shared cores) for the same kernels' MVE paths.
BOARDS = ("an386",)
TIMINGS: dict[str, float] = {}


def _timed(key, t0):
  TIMINGS[key] = round(TIMINGS.get(key, 0.0) + time.time() - t0, 1)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory) -> str:
  if not os.path.exists(MODEL):
    pytest.skip(f"needs MLPerf Tiny's ResNet-8 at {MODEL} (not present)")
  if not os.path.isdir(DATA_DIR):
    pytest.skip(f"needs CIFAR-10 at {DATA_DIR}")
  t0 = time.time()
  with _dataset_cache(tmp_path_factory):
    path = cached_conversion(MODEL, "r8_forge_all.tflite",
                             ["--input_range=0,255", "--calibration_size=200"])
  _timed("convert", t0)
  return path


@pytest.fixture(scope="module")
def ops(artifact) -> list[str]:
  """The builtins the converted model uses (FORGE_RECALIB is always registered)."""
  from forge_tflm.deploy.expected import model_ops

  with open(artifact, "rb") as f:
    names = model_ops(f.read())
  assert names.count("FORGE_RECALIB") == N_SITES
  return sorted(set(names) - {"FORGE_RECALIB"})


@pytest.fixture(scope="module")
def export(artifact, tmp_path_factory):
  """n -> the export-firmware folder for the first n images (one export per n)."""
  from forge_tflm.cli.main import main as cli

  folders = {}

  def get(n: int, arena_bytes: int | None = None) -> str:
    if (n, arena_bytes) not in folders:
      gen = tmp_path_factory.mktemp(f"r8_gen_{n}") / "generated"
      t0 = time.time()
      arena = [f"--arena_bytes={arena_bytes}"] if arena_bytes else []
      with _dataset_cache(tmp_path_factory):
        assert cli(["forge_tflm", "export-firmware", artifact, f"--data_dir={DATA_DIR}",
                    f"--images={n}", f"--output_dir={gen}"] + arena) == 0
      _timed("export", t0)
      folders[(n, arena_bytes)] = str(gen)
    return folders[(n, arena_bytes)]
  return get


def _verify(log_text: str, gen: str, tmp_path, label: str):
  """forge_tflm verify-device on the log (exit status 0 required); returns the result."""
  from forge_tflm.cli.main import main as cli
  from forge_tflm.deploy.export import load_expected
  from forge_tflm.deploy.verify import verify

  result = verify(log_text, load_expected(gen))
  log = tmp_path / f"{label.replace('/', '_')}.log"
  log.write_text(log_text)
  assert cli(["forge_tflm", "verify-device", str(log), f"--expected={gen}"]) == 0, \
      f"{label}:\n{result.markdown()}"
  assert result.ok and result.identical == result.images_expected
  # Every op, every FORGE output and state, the softmax output and the prediction.
  assert set(result.compared) >= {"logits", "pred", "every op", "FORGE outputs",
                                  "FORGE state"}, result.compared
  print(f"\n{label}: verify-device {result.markdown().splitlines()[0].split(': ')[1]}, "
        f"{result.identical}/{result.images_expected} images identical "
        f"({', '.join(result.compared)}); timings {TIMINGS}")
  return result


def _check_run(run, ops, n):
  assert run.ok and len(run.forge_ops) == N_SITES, run.errors
  assert sorted(set(run.ops) - {"FORGE_RECALIB"}) == ops
  assert [c["calls"] for c in run.cost] == [n] * len(run.ops)


@pytest.mark.parametrize("target", TARGETS)
def test_mlperf_resnet8_host_bit_exact(artifact, ops, export, target, tmp_path):
  from forge_tflm import deploy

  if any(shutil.which(t) is None for t in ("make", "gcc", "g++")):
    pytest.skip("needs make, gcc and g++ to build esp32s3_app/host")
  gen = export(N_IMAGES)
  t0 = time.time()
  binary = _make(target, ops, gen=gen)
  _timed(f"build_{target}", t0)
  r = subprocess.run([binary, "--trace=all"], capture_output=True, text=True)
  assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
  run = deploy.parse_app_output(r.stdout)
  _check_run(run, ops, N_IMAGES)
  # The exported arena size holds the model (the ESP-IDF app allocates exactly it).
  header = open(os.path.join(gen, "forge_app_data.h")).read()
  arena = int(re.search(r"#define FORGE_APP_ARENA_BYTES (\d+)", header).group(1))
  assert run.mem["arena_used"] <= arena, (run.mem, arena)
  _verify(r.stdout, gen, tmp_path, f"host {target}/mlperf_r8")


@pytest.mark.parametrize("board", BOARDS)
def test_mlperf_resnet8_cortexm_bit_exact(artifact, ops, export, board, tmp_path):
  from forge_tflm import deploy

  why = cm.missing_tools()
  if why:
    pytest.skip(why)
  n = cm.BOARD_IMAGES[board]
  gen = export(n)
  t0 = time.time()
  elf = cm.build_elf(board, gen, ops=ops)
  _timed(f"build_{board}", t0)
  t0 = time.time()
  text, calib = cm.run_qemu(board, elf, "--trace=all")
  _timed(f"qemu_{board}", t0)
  assert int(calib["instructions_per_tick_x1000"]) == cm.BOARDS[board][2], calib
  run = deploy.parse_app_output(text)
  _check_run(run, ops, n)
  _verify(text, gen, tmp_path, f"{board} ({cm.BOARDS[board][1]})/mlperf_r8")
