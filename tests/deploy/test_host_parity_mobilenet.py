"""The bundled MobileNetV2-0.5 (52 FORGE sites, depthwise convs, ReLU6) on the host
TFLM target, held to the same parity rule as ResNet-20 (issue 16).

Converts models/mobilenet_v2_0.5_cifar10.keras with FORGE at every site (cached in
the build cache, keyed by model and converter sources), reads the ops the converted
model uses (forge_tflm.deploy.expected.model_ops), builds esp32s3_app/host with OPS
set to exactly those for KERNELS=reference and KERNELS=esp_nn (the ResNet-20 builds'
folders: only the kernels ResNet-20 lacks and the app compile again), streams FORGE_TFLM_DEPLOY_IMAGES (default 200) gaussian_noise-5 images at
batch 1 with FORGE adapting, and requires tests/deploy/parity.check_parity: every
op's output, every FORGE state and the logits bit-identical to the evaluator.

Measured (2 shared cores): 200/200 images identical on both targets (every op, state
and logit; OPS = ADD CONV_2D DEPTHWISE_CONV_2D FULLY_CONNECTED MEAN, ReLU6 fused into
the convs), arena_used 578800 B (so the run passes --arena=2 MiB; the app's default
512 KiB is too small), forge_persistent 82080 B. Cold: ~3 min to convert (decoding the calibration split into the session
cache) and compute the expected outputs; warm: ~10 s.
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import subprocess

import numpy as np
import pytest

from forge_tflm.deploy.targets import cached_conversion
from tests.conftest import REPO_ROOT
from tests.deploy.parity import check_parity
from tests.deploy.test_host_parity import (  # noqa: F401  (stream: a fixture)
    DATA_DIR, N_IMAGES, TARGETS, _dataset_cache, _explainer, _make, stream)

MODEL = os.path.join(REPO_ROOT, "models", "mobilenet_v2_0.5_cifar10.keras")
N_SITES = 52
# The builtins esp32s3_app/core's resolver can register (FORGE_APP_OP_*).
RESOLVER_OPS = {"CONV_2D", "DEPTHWISE_CONV_2D", "ADD", "MEAN", "AVERAGE_POOL_2D",
                "FULLY_CONNECTED", "RESHAPE", "SOFTMAX"}
# Its activations need ~400 KB of arena (the host app's default is 512 KiB, less
# what ResNet-20 leaves); the device's arena_used is reported.
ARENA = f"--arena={2 * 1024 * 1024}"


@pytest.fixture(scope="module")
def artifact(tmp_path_factory) -> str:
  return mbv2_artifact(tmp_path_factory)


def mbv2_artifact(tmp_path_factory) -> str:
  """MobileNetV2-0.5 with FORGE at its 52 sites, converted once into the build cache."""
  if not os.path.isdir(DATA_DIR):
    pytest.skip(f"needs CIFAR-10 at {DATA_DIR}")
  with _dataset_cache(tmp_path_factory):
    return cached_conversion(MODEL, "mbv2_forge_all.tflite", [])


@pytest.fixture(scope="module")
def ops(artifact) -> list[str]:
  """The builtins the converted model uses (FORGE_RECALIB is always registered)."""
  from forge_tflm.deploy.expected import model_ops

  with open(artifact, "rb") as f:
    used = sorted(set(model_ops(f.read())) - {"FORGE_RECALIB"})
  assert set(used) <= RESOLVER_OPS, f"the app's resolver lacks {set(used) - RESOLVER_OPS}"
  return used


@pytest.fixture(scope="module")
def binaries(ops) -> dict[str, str]:
  missing = [t for t in ("make", "gcc", "g++") if shutil.which(t) is None]
  if missing:
    pytest.skip(f"needs {', '.join(missing)} to build esp32s3_app/host")
  return {k: _make(k, ops) for k in TARGETS}


@pytest.fixture(scope="module")
def runs(artifact, binaries, stream, tmp_path_factory):
  """target -> (AppRun, ExpectedOutputs, image file); both targets run in parallel."""
  from forge_tflm import deploy

  x = deploy.model_input(artifact, stream.images)
  images = deploy.write_image_stream(str(tmp_path_factory.mktemp("mbv2") / "images.bin"), x)

  def run(target):
    return subprocess.run([binaries[target], artifact, images, f"--images={N_IMAGES}",
                           "--trace=all", ARENA], capture_output=True, text=True)

  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    pending = {t: pool.submit(run, t) for t in TARGETS}
    exp = deploy.expected_outputs(artifact, x, trace="all")
    out = {}
    for target, fut in pending.items():
      r = fut.result()
      assert r.returncode == 0, f"{target}: {r.stdout[-2000:]}{r.stderr[-2000:]}"
      out[target] = (deploy.parse_app_output(r.stdout), exp, images)
  return out


@pytest.mark.parametrize("target", TARGETS)
def test_mobilenet_v2_matches_evaluator(runs, artifact, binaries, ops, target):
  run, exp, images = runs[target]
  identical = check_parity(f"{target}/mbv2", run, exp,
                           _explainer(binaries[target], artifact, images, [ARENA]))
  assert np.array_equal(run.predictions, np.argmax(run.logits, axis=1))
  assert len(run.forge_ops) == N_SITES
  assert sorted(set(run.ops) - {"FORGE_RECALIB"}) == ops
  assert [c["calls"] for c in run.cost] == [N_IMAGES] * len(run.ops)
  print(f"\n{target}/mbv2 (OPS={' '.join(ops)}): {identical}/{N_IMAGES} images with "
        f"identical logits; arena_used={run.mem['arena_used']} "
        f"forge_persistent={run.mem['forge_persistent']} "
        f"forge_scratch={run.mem['forge_scratch']}")


def test_mobilenet_v2_default_conversion_is_its_plain_int8_model_in_source_mode(artifact):
  """The default conversion measures targets on the plain int8 model (issue 50): in
  source mode the artifact is that model bit for bit on the calibration images."""
  import json

  with open(os.path.splitext(artifact)[0] + ".json") as f:
    manifest = json.load(f)
  assert manifest["targets"] == {"source": "measured", "images": 300}
  mode = manifest["parity"]["source_mode_vs_input"]
  assert mode["images"] == 300 and mode["max_output_difference"] == 0.0, mode
  assert len(manifest["sites"]) == 52
