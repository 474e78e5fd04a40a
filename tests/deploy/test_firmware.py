"""forge_tflm run-firmware: one command from an artifact to a verdict (host target here;
tests/deploy/test_esp32s3_idf.py runs the ESP-IDF target).

  - a missing tool chain or snapshot is named, with where it comes from, in one line and
    before the slow export;
  - a second run into the same folder re-exports and verifies again, and the export
    folder holds only export-firmware's files (builds write beside the ELF or binary);
  - the mode travels with the export: frozen runs verify against FORGE frozen.
"""

from __future__ import annotations

import os

import pytest

from forge_tflm.cli.main import main as cli
from forge_tflm.deploy import firmware
from forge_tflm.deploy.export import OUTPUTS
from tests.deploy import test_cortexm as cm

N = 4


def test_missing_shared_material_is_named_before_the_export(tmp_path, monkeypatch, capsys):
  monkeypatch.setenv("FORGE_TFLM_SHARED", str(tmp_path / "nowhere"))
  for target in firmware.TARGETS:
    why = firmware.missing_tools(target)
    assert why and "nowhere" in why and "FORGE_TFLM_SHARED" in why, (target, why)
  artifact = tmp_path / "a.tflite"
  artifact.write_bytes(b"not a model")  # never read: the tools are checked first
  rc = cli(["forge_tflm", "run-firmware", str(artifact), "--target=esp32s3-idf",
            f"--output_dir={tmp_path / 'run'}"])
  err = capsys.readouterr().err.strip()
  assert rc == 1 and len(err.splitlines()) == 1, err
  assert "nowhere/toolchains/" in err and "--target=esp32s3-idf" in err, err
  assert not (tmp_path / "run").exists()


def test_target_is_required(capsys):
  assert cli(["forge_tflm", "run-firmware", "x.tflite"]) == 1
  assert "--target is required" in capsys.readouterr().err


@pytest.fixture(scope="module")
def artifact():
  if firmware.missing_tools("host"):
    pytest.skip(firmware.missing_tools("host"))
  if not os.path.isdir(cm.DATA_DIR):
    pytest.skip(f"needs CIFAR-10 at {cm.DATA_DIR}")
  return cm.artifact_paths()["forge_3"]


def test_second_run_into_the_same_folder(artifact, tmp_path, capsys):
  args = ["forge_tflm", "run-firmware", artifact, "--target=host",
          f"--data_dir={cm.DATA_DIR}", f"--images={N}", f"--output_dir={tmp_path}"]
  assert cli(args) == 0
  assert cli(args + ["--seed=1"]) == 0  # another stream into the same folder
  out = capsys.readouterr().out
  assert out.count("# verify-device: BIT-EXACT") == 2, out
  assert sorted(os.listdir(tmp_path / "export")) == sorted(OUTPUTS)
  assert (tmp_path / "verify.md").read_text().startswith("# verify-device: BIT-EXACT")


def test_frozen_mode_runs_frozen(artifact, tmp_path):
  result = firmware.run_firmware(artifact, "host", str(tmp_path), data_dir=cm.DATA_DIR,
                                 images=N, mode="frozen")
  v = result.verification
  assert v.ok and v.accuracy_device == v.accuracy_source, v.markdown()
