"""The ESP-IDF app (esp32s3_app) built with idf.py, booted from its flash image under the
emulator, verified bit for bit: what a user flashes on a board.

forge_tflm.deploy.firmware does what `forge_tflm run-firmware --target=esp32s3-idf` does:
ESP-IDF v5.1.7 from ../shared/toolchains/esp-idf with the shared GCC 12.2 (prepared in
the build cache), esp-tflite-micro and esp-nn from the pinned snapshots as local
components (offline), `idf.py build` out of the export folder, the bootloader,
partition table and app merged into one 4 MB flash image, booted by the chip's ROM
under qemu-system-xtensa -machine esp32s3, the UART log checked by verify-device.

Per artifact, the 200-image gaussian_noise-5 stream with no --arena_bytes (the
export's own estimate): the bundled ResNet-20 with FORGE at 21 sites (adapting, and
gated on a class-sorted stream), the plain int8 model (convert --sites=none: its
manifest, no FORGE op; the first 50 images) and MobileNetV2-0.5 with its arena in
PSRAM; with --runslow also at 3 sites and the FORGE artifact of MLPerf Tiny's ResNet-8
(tests/deploy/test_mlperf_parity.py's conversion), which the bare-metal S3 tests run
in CI.
One cold build (~8 minutes on 2 cores; the build cache keeps it per checkout); each
further export recompiles the data and relinks. Skips (with what is missing) without
cmake/ninja, the ESP-IDF tarball, the tool chain or emulator, the snapshots or CIFAR-10.
"""

from __future__ import annotations

import os

import pytest

from forge_tflm.deploy import firmware
from forge_tflm.deploy.targets import r20_artifacts
from tests.deploy import test_cortexm as cm
from tests.deploy.test_mlperf_parity import artifact  # noqa: F401 (MLPerf ResNet-8 fixture)

N_IMAGES = int(os.environ.get("FORGE_TFLM_ESP32S3_IMAGES", cm.STREAM_LIMIT))
TARGET = "esp32s3-idf"


@pytest.fixture(scope="module")
def tools():
  why = firmware.missing_tools(TARGET)
  if why:
    pytest.skip(why)
  if not os.path.isdir(cm.DATA_DIR):
    pytest.skip(f"needs CIFAR-10 at {cm.DATA_DIR}")


@pytest.fixture(scope="module")
def r20(tools) -> dict[str, str]:
  return r20_artifacts()


def _run(artifact: str, tmp_path, images: int = N_IMAGES, **export_args):
  result = firmware.run_firmware(artifact, TARGET, str(tmp_path / "run"),
                                 data_dir=cm.DATA_DIR, images=images, **export_args)
  v = result.verification
  assert result.run.ended, open(result.run.log_path).read()[-3000:]
  assert v.ok and v.identical == images, v.markdown()
  return result


@pytest.mark.parametrize("name", ["forge_all", pytest.param("forge_3", marks=pytest.mark.slow),
                                  "plain"])
def test_idf_app_boots_from_flash_and_verifies_bit_exact(r20, tmp_path, name):
  images = min(N_IMAGES, 50) if name == "plain" else N_IMAGES
  v = _run(r20[name], tmp_path, images).verification
  if name != "plain":
    assert {"logits", "pred", "FORGE outputs", "FORGE state"} <= set(v.compared), v.compared


def test_idf_app_gated_on_a_class_sorted_stream(r20, tmp_path):
  from forge_tflm.evaluation import field_streams

  v = _run(r20["forge_all"], tmp_path, mode="gated",
           label_order=field_streams.LabelOrder("sorted", None, 1)).verification
  assert {"gate path", "gate decisions"} <= set(v.compared), v.compared


@pytest.mark.slow  # The bare-metal S3 runs it in CI (test_esp32s3_mlperf.py).
def test_idf_app_runs_mlperf_resnet8(tools, artifact, tmp_path):
  v = _run(artifact, tmp_path).verification
  assert {"logits", "pred", "FORGE outputs", "FORGE state"} <= set(v.compared), v.compared


def test_idf_app_runs_mobilenet_v2_with_its_arena_in_psram(tools, tmp_path_factory, tmp_path):
  """MobileNetV2-0.5 (52 sites): its ~0.9 MB arena exceeds the internal SRAM, so the app
  takes it from PSRAM (the emulator's quad PSRAM, as on N8R2 modules). Failed before
  main/CMakeLists.txt required esp_psram: without it CONFIG_SPIRAM does not exist and
  the arena allocation failed. Its op 8 is the depthwise shape ESP-NN's S3 kernel
  overruns without the app's guard (docs/decisions/esp-nn-s3-depthwise-scratch.md)."""
  from tests.deploy.test_host_parity_mobilenet import mbv2_artifact

  result = _run(mbv2_artifact(tmp_path_factory), tmp_path)
  v = result.verification
  assert {"logits", "pred", "FORGE outputs", "FORGE state"} <= set(v.compared), v.compared
  mem = next(line for line in open(result.run.log_path) if line.startswith("mem "))
  assert int(dict(f.split("=") for f in mem.split()[1:])["arena_size"]) > 512 * 1024, mem
