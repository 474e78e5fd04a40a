"""The application core (esp32s3_app/core) on x86 matches the host evaluator.

Builds esp32s3_app/host twice from the third-party snapshots (forge_tflm.deploy.targets):
`reference` (TFLite-Micro 90b983c's reference kernels) and `esp_nn` (esp-tflite-micro's
kernels/esp_nn/ adapters over ESP-NN's plain-C _ansi kernels: what an ESP32-S3 runs
minus its assembly). Converts the bundled ResNet-20 three ways (FORGE at all 21
sites, at 3 sites, plain int8 control), streams 200 gaussian_noise-5 CIFAR-10 test
images (the evaluator's subset and order) at batch 1 through each binary with
FORGE adapting, and compares, image by image, with forge_tflm.deploy.expected_outputs
(the evaluator at batch 1 in reference kernel mode):

  - every op's output checksum must match the evaluator's at every image, FORGE
    ops included, and so must every FORGE op's float32 state (mu, var) after every
    image;
  - the logits (the final FULLY_CONNECTED) must be identical: the evaluator's
    reference mode runs FULLY_CONNECTED with TFLM's two-step requantization
    (forge_tflm.runtime.tflm_kernels). Before it, LiteRT's single-rounding kernel
    missed by 1 LSB on 1-3 images in 200 (e.g. image 180 of the 21-site run, an
    exact -20.50047).

A differing op is reported with its image, and the device's whole output tensor is
dumped (--dump=OP:IMAGE) to say how many values differ and by how much. Objects and
artifacts live in the build cache (cold: ~3.6 min of compiling on 2 shared cores;
warm: make has nothing to do). Set FORGE_TFLM_DEPLOY_IMAGES to change the
stream length (default 200).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import re
import shutil
import subprocess
import time

import numpy as np
import pytest

from forge_tflm.deploy.targets import DATA_DIR, HOST_OPS, artifact_paths, build_host
from forge_tflm.deploy.toolchains import ToolMissing
from tests.deploy.parity import check_parity
N_IMAGES = int(os.environ.get("FORGE_TFLM_DEPLOY_IMAGES", "200"))
TARGETS = ("reference", "esp_nn")
ARTIFACTS = ("forge_all", "forge_3", "plain")
TIMINGS: dict[str, float] = {}
INPUTS: dict[str, str] = {}  # artifact name -> int8 image file (runs fixture)


def _timed(key):
  class _T:
    def __enter__(self):
      self.t0 = time.time()

    def __exit__(self, *exc):
      TIMINGS[key] = round(time.time() - self.t0, 1)
  return _T()


# ---------------------------------------------------------------- artifacts

@pytest.fixture(scope="session")
def artifacts(tmp_path_factory) -> dict[str, str]:
  """name -> .tflite path, converted once per (model, converter sources, options)."""
  if not os.path.isdir(DATA_DIR):
    pytest.skip(f"needs CIFAR-10 at {DATA_DIR}")
  with _timed("convert"), _dataset_cache(tmp_path_factory):
    paths = artifact_paths()
  return {name: paths[name] for name in ARTIFACTS}


@contextlib.contextmanager
def _dataset_cache(tmp_path_factory):
  """Decoded datasets go to the session's temp cache (as tests/conftest.py does)."""
  with pytest.MonkeyPatch.context() as mp:
    if "FORGE_TFLM_CACHE" not in os.environ:
      mp.setenv("FORGE_TFLM_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
    yield


# ------------------------------------------------------------------ binaries

def _make(kernels: str, ops=HOST_OPS, gen: str | None = None) -> str:
  """The host binary for `kernels` in run-firmware's build folder: forge_app_host, or
  with gen (an export folder) the embedded binary, linked beside the export's data."""
  try:
    return build_host(kernels, ops, gen)
  except ToolMissing as e:  # a snapshot
    pytest.skip(str(e))


@pytest.fixture(scope="session")
def binaries() -> dict[str, str]:
  missing = [t for t in ("make", "gcc", "g++") if shutil.which(t) is None]
  if missing:
    pytest.skip(f"needs {', '.join(missing)} to build esp32s3_app/host")
  out = {}
  with _timed("build"):
    for k in TARGETS:
      out[k] = _make(k)
  return out


# ---------------------------------------------------------- stream, expected

@pytest.fixture(scope="session")
def stream(tmp_path_factory):
  from forge_tflm import deploy

  if not os.path.isdir(DATA_DIR):
    pytest.skip(f"needs CIFAR-10 at {DATA_DIR}")
  with _dataset_cache(tmp_path_factory):
    return deploy.corrupted_stream(DATA_DIR, "gaussian_noise", 5, limit=N_IMAGES,
                                   cache_dir=str(tmp_path_factory.getbasetemp() / "corr"))


@pytest.fixture(scope="session")
def runs(artifacts, binaries, stream, tmp_path_factory):
  """(target, artifact) -> (AppRun, ExpectedOutputs); device runs in parallel."""
  from forge_tflm import deploy

  work = tmp_path_factory.mktemp("deploy_runs")
  inputs, expected = {}, {}
  with _timed("expected"):
    for name, path in artifacts.items():
      x = deploy.model_input(path, stream.images)
      inputs[name] = INPUTS[name] = str(work / f"{name}.bin")
      deploy.write_image_stream(inputs[name], x)
      expected[name] = deploy.expected_outputs(path, x, trace="all")

  def run(target, name):
    r = subprocess.run([binaries[target], artifacts[name], inputs[name],
                        f"--images={N_IMAGES}", "--trace=all"],
                       capture_output=True, text=True)
    return target, name, r

  out = {}
  with _timed("device_runs"), concurrent.futures.ThreadPoolExecutor(2) as pool:
    for target, name, r in pool.map(lambda a: run(*a),
                                    [(t, a) for t in TARGETS for a in ARTIFACTS]):
      assert r.returncode == 0, f"{target}/{name}: {r.stdout[-2000:]}{r.stderr[-2000:]}"
      out[(target, name)] = (deploy.parse_app_output(r.stdout), expected[name])
  return out


# --------------------------------------------------------------------- tests

def _explainer(binary, artifact, images, extra=()):
  """explain(n, k): how op k's output at image n differs (dumps it from the device)."""
  def explain(n, k):
    from forge_tflm import deploy

    r = subprocess.run([binary, artifact, images, f"--images={n + 1}", f"--dump={k}:{n}",
                        "--trace=none"] + list(extra), capture_output=True, text=True)
    device = deploy.parse_app_output(r.stdout).tensors.get((n, k))
    x = np.fromfile(images, np.int8)[:(n + 1) * 32 * 32 * 3].reshape(n + 1, 32, 32, 3)
    mode = "frozen" if "--frozen" in extra else "adapt"
    want = deploy.expected_outputs(artifact, x, mode=mode, trace="none",
                                   keep_outputs=True).op_outputs[n][k].reshape(-1)
    if device is None or device.size != want.size:
      return "device tensor not available"
    d = device.astype(int) - want.astype(int)
    return (f"{int(np.count_nonzero(d))}/{d.size} values differ, max |diff| "
            f"{int(np.abs(d).max())} LSB, first at flat index {int(np.argmax(d != 0))}")
  return explain


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ARTIFACTS)
def test_device_matches_evaluator(runs, artifacts, binaries, target, name):
  run, exp = runs[(target, name)]
  identical = check_parity(f"{target}/{name}", run, exp,
                           _explainer(binaries[target], artifacts[name], INPUTS[name]))
  assert np.array_equal(run.predictions, np.argmax(run.logits, axis=1))
  n_forge = {"forge_all": 21, "forge_3": 3, "plain": 0}[name]
  # ESP-NN's FULLY_CONNECTED runs unguarded (docs/decisions/esp-nn-fc-guard.md).
  assert "fc_guard" not in run.header, run.header
  assert len(run.forge_ops) == n_forge
  if n_forge:
    assert run.mem["forge_persistent"] > 8 * sum(1 for _ in run.forge_ops)
  else:
    assert run.mem["forge_persistent"] == 0 and run.mem["forge_scratch"] == 0
  # Per-operator cost covers every op of every image.
  assert [c["calls"] for c in run.cost] == [N_IMAGES] * len(run.ops)
  print(f"\n{target}/{name}: {identical}/{N_IMAGES} images with identical logits; "
        f"arena_used={run.mem['arena_used']} forge_persistent={run.mem['forge_persistent']} "
        f"forge_scratch={run.mem['forge_scratch']}; "
        f"{run.done['ticks'] and int(run.done['ticks']) / 1e6 / N_IMAGES:.1f} ms/image; "
        f"timings {TIMINGS}")
  hz = run.clock_hz or 1
  print("  ms/image by op type: " + ", ".join(
      f"{k} {v['ticks'] / hz * 1e3 / N_IMAGES:.2f}" for k, v in run.cost_type.items()))


def test_corrupt_flatbuffer_is_one_error_line_before_tflm_reads_it(artifacts, binaries,
                                                                  tmp_path):
  """The app verifies the flatbuffer before TFLM reads it (TFLM trusts its offsets):
  a truncated model and one whose root offset points past its end each end in
  `error what=model_flatbuffer` and a non-zero exit, never a read out of bounds
  (issue 53: corrupt flatbuffers reached TFLM unverified and crashed the app)."""
  from forge_tflm import deploy

  data = open(artifacts["forge_3"], "rb").read()
  images = tmp_path / "x.bin"
  deploy.write_image_stream(str(images), np.zeros((1, 32, 32, 3), np.int8))
  bad = {"truncated": data[:len(data) * 3 // 5],
         "root_past_end": (len(data) + 64).to_bytes(4, "little") + data[4:]}
  for kind, model in bad.items():
    path = tmp_path / f"{kind}.tflite"
    path.write_bytes(model)
    r = subprocess.run([binaries["reference"], str(path), str(images), "--images=1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode > 0 and "error what=model_flatbuffer" in r.stdout, (kind, r)


def test_forge_state_and_accuracy_match_evaluator_protocol(stream, artifacts, tmp_path_factory):
  """expected_outputs is the evaluator's `forge` method at batch 1 (same accuracy)."""
  from forge_tflm import deploy
  from forge_tflm.artifact import Artifact
  from forge_tflm.evaluation import protocol

  path = artifacts["forge_all"]
  x = deploy.model_input(path, stream.images)
  exp = deploy.expected_outputs(path, x, trace="none", keep_states=True)
  # The evaluator shuffles with ordering(n, 0, seed): feeding it the stream in
  # identity order would reshuffle, so give it the clean-subset order back.
  inverse = np.argsort(stream.order)
  artifact = Artifact.load(path, require_manifest=True)
  contract = artifact.input_contract
  raw = protocol.evaluate(
      protocol.EvalConfig(methods=("forge",), batch_size=1, kernels="reference"),
      [protocol.Stream("s", stream.images[inverse], stream.labels[inverse])],
      artifact=artifact, float_model=None, contract=contract)
  acc = raw["accuracy"]["forge"]["s"][0]
  assert acc == pytest.approx(float(np.mean(exp.predictions == stream.labels)))
  assert len(exp.states) == N_IMAGES and len(exp.states[-1]) == 21


def test_export_firmware_embedded_build_verifies_bit_exact(tmp_path, artifacts, binaries):
  """forge_tflm export-firmware (what the firmware targets compile) -> C arrays
  compiled in (make embedded) -> forge_tflm verify-device on the binary's log: every
  image bit-exact (logits, every op, FORGE outputs and state); the arena size it
  exported holds the model; the same images from the file-fed binary print the same."""
  from forge_tflm import deploy
  from forge_tflm.cli.main import main as cli

  n = 6
  gen = tmp_path / "gen"
  with pytest.MonkeyPatch.context() as mp:
    if "FORGE_TFLM_CACHE" not in os.environ:
      mp.setenv("FORGE_TFLM_CACHE", str(tmp_path / "cache"))
    assert cli(["forge_tflm", "export-firmware", artifacts["forge_3"],
                f"--data_dir={DATA_DIR}", f"--images={n}", f"--output_dir={gen}"]) == 0
  header = (gen / "forge_app_data.h").read_text()
  assert header.startswith("// Generated by: forge_tflm export-firmware ")
  arena = int(re.search(r"#define FORGE_APP_ARENA_BYTES (\d+)", header).group(1))
  text = (gen / "forge_app_data.cc").read_text()
  assert "alignas(16) const uint8_t forge_app_model[]" in text
  assert f"forge_app_num_images = {n};" in text
  binary = _make("reference", gen=gen)
  r = subprocess.run([binary, "--trace=all"], capture_output=True, text=True)
  assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
  run = deploy.parse_app_output(r.stdout)
  # The export holds every target's kernels' scratch (ESP-NN's S3 asks most); the host
  # family's own estimate is the one to hold against the host's arena_used.
  from forge_tflm.artifact import Artifact
  from forge_tflm.deploy.arena import arena_bytes
  a = Artifact.load(artifacts["forge_3"], require_manifest=True)
  host = arena_bytes(a.model, a.manifest, kernels="reference")
  assert run.ok and run.mem["arena_used"] <= host <= 1.6 * run.mem["arena_used"] <= 1.6 * arena
  log = tmp_path / "device.log"
  log.write_text(r.stdout)
  assert cli(["forge_tflm", "verify-device", str(log), f"--expected={gen}"]) == 0
  # The gate's settings travel in the header; the firmware's --gate runs them.
  from forge_tflm.deploy.export import device_gate, export_firmware
  from forge_tflm.artifact import Artifact
  from forge_tflm.evaluation.gate import DEVICE_PERIOD, GateConfig, device_defines
  assert device_gate().period == DEVICE_PERIOD
  for name, value in device_defines(device_gate()).items():
    assert f"#define {name} {value}\n" in header
  # Exported for the gate (a short probe and period, so that 6 images hold decisions):
  # the embedded build's --gate verifies against it, and the adapting log does not.
  gen_gate = tmp_path / "gen_gate"
  export_firmware(artifacts["forge_3"], str(gen_gate), data_dir=DATA_DIR, images=n,
                  mode="gated", gate=GateConfig(probe_images=2, period=3))
  header = (gen_gate / "forge_app_data.h").read_text()
  assert "#define FORGE_APP_GATE_PROBE_IMAGES 2\n" in header
  assert "#define FORGE_APP_GATE_PERIOD 3\n" in header
  binary = _make("reference", gen=gen_gate)
  r = subprocess.run([binary, "--trace=forge", "--gate"], capture_output=True, text=True)
  gated = deploy.parse_app_output(r.stdout)
  assert r.returncode == 0 and gated.ok and gated.header["mode"] == "gated"
  assert len(gated.gate_decisions) == 2 and len(gated.paths) == n
  (tmp_path / "gated.log").write_text(r.stdout)
  assert cli(["forge_tflm", "verify-device", str(tmp_path / "gated.log"),
              f"--expected={gen_gate}"]) == 0
  assert cli(["forge_tflm", "verify-device", str(log), f"--expected={gen_gate}"]) == 1
  # The embedded binary and the file-fed one print the same for the same images.
  r2 = subprocess.run([binaries["reference"], artifacts["forge_3"], str(gen / "images.bin"),
                       "--trace=all"], capture_output=True, text=True)
  from_file = deploy.parse_app_output(r2.stdout)
  assert np.array_equal(from_file.logits, run.logits)
  assert np.array_equal(from_file.op_checksums, run.op_checksums)


def test_frozen_mode_matches_evaluator_source(runs, artifacts, binaries, stream, tmp_path):
  """config.adapt=false (ForgeRecalibControl FROZEN) is the evaluator's `source`."""
  from forge_tflm import deploy

  name, target = "forge_all", "esp_nn"
  path = artifacts[name]
  x = deploy.model_input(path, stream.images)
  images = deploy.write_image_stream(str(tmp_path / "images.bin"), x)
  exp = deploy.expected_outputs(path, x, mode="frozen", trace="all")
  r = subprocess.run([binaries[target], path, images, f"--images={N_IMAGES}", "--trace=all",
                      "--frozen"], capture_output=True, text=True)
  assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
  run = deploy.parse_app_output(r.stdout)
  assert run.header["mode"] == "frozen"
  identical = check_parity(f"{target}/{name}-frozen", run, exp,
                           _explainer(binaries[target], path, images, ["--frozen"]))
  # Frozen: the state never leaves the clean targets; adapting changed the outputs.
  assert np.all(run.state_checksums == run.state_checksums[0])
  adapt = runs[(target, name)][0]
  assert np.any(adapt.forge_checksums[1:] != run.forge_checksums[1:])
  print(f"\n{target}/{name} frozen: {identical}/{N_IMAGES} images with identical logits")


def test_export_firmware_refuses_a_model_its_manifest_does_not_describe(tmp_path, artifacts,
                                                                        capsys):
  from forge_tflm.cli.main import main as cli

  src = artifacts["forge_3"]
  bad = tmp_path / "r20.tflite"
  data = bytearray(open(src, "rb").read())
  data[-1] ^= 0xFF
  bad.write_bytes(bytes(data))
  shutil.copy(os.path.splitext(src)[0] + ".json", tmp_path / "r20.json")
  out = tmp_path / "gen"
  assert cli(["forge_tflm", "export-firmware", str(bad), f"--data_dir={DATA_DIR}",
              "--images=2", f"--output_dir={out}"]) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "sha256" in err[0], err
  assert not out.exists() or not any(out.iterdir())  # nothing half-written
  assert cli(["forge_tflm", "export-firmware", f"--data_dir={DATA_DIR}"]) == 1


def test_gated_app_matches_evaluator_forge_gated(artifacts, binaries, stream, tmp_path):
  """config.gate (custom_ops/forge_controller/src/forge_controller.h) is the evaluator's `forge-gated` at
  batch 1: the same path (source / adapt / frozen) and the same logits at every
  image, the same decisions at the same images, through several probes (short
  probe and period so that 200 images hold many): the shuffled stream without the
  label-correlation detector, then the same images sorted by class with the default
  detector, which must flag them, with every probe deciding "on" (delta -1) so that
  the op's adapt_safe mode runs (the label-safe ops alone adapt)."""
  from forge_tflm import deploy
  from forge_tflm.evaluation.gate import GateConfig, host_arguments

  name, target = "forge_all", "reference"
  path = artifacts[name]
  shuffled = deploy.model_input(path, stream.images)
  by_class = shuffled[np.argsort(stream.labels, kind="stable")]
  ends = []  # Images into its probe at which each decision came.
  for x, window, delta in ((shuffled, 0, None), (by_class, None, -1.0)):
    images = deploy.write_image_stream(str(tmp_path / "images.bin"), x)
    gate = GateConfig(probe_images=16, period=40, label_window=window, delta=delta)
    exp = deploy.expected_gated(path, x, gate)
    r = subprocess.run([binaries[target], path, images, f"--images={N_IMAGES}",
                        "--trace=none", "--gate"] + host_arguments(gate),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    run = deploy.parse_app_output(r.stdout)
    assert run.ok and run.header["mode"] == "gated"
    assert run.paths == exp.paths
    assert [(d["image"], d["on"], d["correlated"]) for d in run.gate_decisions] == \
        [(d["image"], d["on"], d["correlated"]) for d in exp.decisions]
    assert len(exp.decisions) == N_IMAGES // 40 + (N_IMAGES % 40 >= 16)
    for got, want in zip(run.gate_decisions, exp.decisions):
      for key in ("score", "agreement", "chance"):
        assert abs(got[key] - want[key]) <= 1e-6, key
    np.testing.assert_array_equal(run.logits, exp.logits)
    np.testing.assert_array_equal(run.predictions, exp.predictions)
    # The detector is off on the shuffled stream and flags the sorted one, where the
    # gate then adapts in adapt_safe mode.
    assert any(d["correlated"] for d in exp.decisions) is (window is None)
    if window is None:
      assert all(d["on"] for d in exp.decisions) and "adapt" in exp.paths
    ends += [d["image"] % 40 for d in exp.decisions]
    print(f"\n{target}/{name} gated (label_window {window}): paths"
          f" {exp.paths.count('adapt')} adapt, {exp.paths.count('source')} source,"
          f" {exp.paths.count('frozen')} frozen; decisions {[d['on'] for d in exp.decisions]}"
          f" at {[d['image'] % 40 for d in exp.decisions]} into their probes")
  assert set(ends) == {15}
