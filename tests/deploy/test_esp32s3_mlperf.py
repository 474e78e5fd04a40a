"""MLPerf Tiny's ResNet-8 on the emulated ESP32-S3 (ESP-NN's _esp32s3 kernels), bit-exact
with the evaluator: the int8 model it ships as, and the FORGE artifact converted from
it (tests/deploy/test_mlperf_parity.py's conversion and export fixtures), adapting and
gated.

  shipped int8 model   every op's output and the softmax output vs the evaluator
                       (tests/deploy/parity.check_parity; no manifest, so no export)
  FORGE, adapting      export-firmware -> QEMU -> verify-device (every op, FORGE
                       output and state, softmax output, prediction)
  FORGE, gated         export-firmware --mode=gated (a short probe and period so that
                       a few images hold decisions) -> QEMU --gate -> verify-device

The whole 200-image stream per run (about 2 minutes in all; FORGE_TFLM_ESP32S3_IMAGES=N
for fewer). The S3 build is test_esp32s3_qemu.py's: one library for ResNet-20's and
ResNet-8's operators. Skips (with the reason) without the shared model, CIFAR-10, the
toolchain/QEMU tarballs or the third-party snapshots.
"""

from __future__ import annotations

import collections
import os
import time

import pytest

from tests.deploy import test_cortexm as cm
from tests.deploy import test_esp32s3_qemu as s3
from tests.deploy.parity import check_parity
from tests.deploy.test_mlperf_parity import (  # noqa: F401 (fixtures)
    MODEL, N_SITES, _check_run, _verify, artifact, export, ops)

_ENV_IMAGES = os.environ.get("FORGE_TFLM_ESP32S3_IMAGES")
N_IMAGES = int(_ENV_IMAGES) if _ENV_IMAGES else cm.STREAM_LIMIT


@pytest.fixture(scope="module")
def tools():
  """First in every test's arguments: skip before converting without the S3 tools."""
  s3._tools()


@pytest.fixture(scope="module")
def s3_ops(tools, ops) -> list[str]:
  """The model's builtins, all in the S3 build's operator set."""
  assert set(ops) <= set(s3.OPS), ops
  return ops


def _shipped(stream, n, tmp_path):
  from forge_tflm import deploy

  x = deploy.model_input(MODEL, stream.images[:n])
  elf = s3.build_elf(cm.gen_dir_for(MODEL, x, "r8_int8"))
  text, _ = s3.run_qemu(elf, "--trace=all")
  run = deploy.parse_app_output(text)
  assert run.ok and not run.forge_ops and len(run.ticks) == n, text[-2000:]
  exp = deploy.expected_outputs(MODEL, x, trace="all")
  identical = check_parity("esp32s3/mlperf_r8_int8", run, exp)
  print(f"\nesp32s3/mlperf_r8_int8 (shipped): {identical}/{n} identical, every op "
        f"bit-identical; arena_used={run.mem['arena_used']}")


def test_esp32s3_mlperf_shipped_int8(tools, s3_ops, stream, tmp_path):
  _shipped(stream, N_IMAGES, tmp_path)


def _adapting(artifact, s3_ops, export, n, tmp_path):
  from forge_tflm import deploy

  gen = export(n)  # the export's own arena estimate (ESP-NN's S3 scratch counted)
  t0 = time.time()
  text, _ = s3.run_qemu(s3.build_elf(gen), "--trace=all")
  s3.TIMINGS[f"mlperf_adapt_{n}"] = round(time.time() - t0, 1)
  _check_run(deploy.parse_app_output(text), s3_ops, n)
  _verify(text, gen, tmp_path, "esp32s3/mlperf_r8")


def test_esp32s3_mlperf_forge_adapting(tools, artifact, s3_ops, export, tmp_path):
  _adapting(artifact, s3_ops, export, N_IMAGES, tmp_path)


def _gated(artifact, n, tmp_path):
  from forge_tflm import deploy
  from forge_tflm.deploy.export import export_firmware
  from forge_tflm.evaluation.gate import GateConfig

  gen = tmp_path / f"gen_gate_{n}"
  with pytest.MonkeyPatch.context() as mp:
    if "FORGE_TFLM_CACHE" not in os.environ:
      mp.setenv("FORGE_TFLM_CACHE", str(tmp_path / "cache"))
    export_firmware(artifact, str(gen), data_dir=cm.DATA_DIR, images=n,
                    mode="gated", gate=GateConfig(probe_images=2, period=3))
  text, _ = s3.run_qemu(s3.build_elf(str(gen)), "--trace=forge --gate")
  run = deploy.parse_app_output(text)
  assert run.ok and run.header["mode"] == "gated", text[-2000:]
  assert len(run.gate_decisions) >= 2 and len(run.paths) == n
  assert len(run.forge_ops) == N_SITES
  _verify_gated(text, str(gen), tmp_path)
  print(f"\nesp32s3/mlperf_r8 gated: verify-device BIT-EXACT, {n} images, paths "
        f"{dict(collections.Counter(run.paths))}, {len(run.gate_decisions)} gate decisions")


def test_esp32s3_mlperf_forge_gated(tools, artifact, s3_ops, tmp_path):
  """The gate on the device (--gate, the export's settings), as the evaluator's."""
  _gated(artifact, N_IMAGES, tmp_path)


def _verify_gated(text: str, gen: str, tmp_path) -> None:
  from forge_tflm.cli.main import main as cli

  log = tmp_path / "gated.log"
  log.write_text(text)
  assert cli(["forge_tflm", "verify-device", str(log), f"--expected={gen}"]) == 0, text[-2000:]


@pytest.fixture(scope="module")
def stream(tools, tmp_path_factory):
  from forge_tflm import deploy

  if not os.path.isdir(cm.DATA_DIR):
    pytest.skip(f"needs CIFAR-10 at {cm.DATA_DIR}")
  return deploy.corrupted_stream(cm.DATA_DIR, "gaussian_noise", 5, limit=cm.STREAM_LIMIT,
                                 cache_dir=str(tmp_path_factory.getbasetemp() / "corr"))
