"""`forge_tflm eval` end to end: generated corruptions of an image folder, all reports."""

import json
import os

import pytest

from forge_tflm.cli import main as cli
from forge_tflm.ops import RecalibOptions
from forge_tflm.converter.options import ConvertOptions
from forge_tflm.testing import tiny_models
from tests.data import fixtures


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  d = tmp_path_factory.mktemp("cli_eval")
  src, _ = tiny_models.convert_tiny(d, ConvertOptions(recalib=RecalibOptions(window=64)), size=32)
  data_dir = fixtures.write_image_folder(str(d / "data"), fixtures.image_folder_entries(6))
  return d, src, data_dir


def test_eval_writes_reports(setup, capsys):
  d, src, data_dir = setup
  out = d / "eval"
  code = cli.main(["forge_tflm", "eval", f"--artifact={d / 'tiny.tflite'}",
                   f"--keras_model={src}", f"--data_dir={data_dir}",
                   "--methods=source,forge,bn-adapt", "--corruptions=contrast,fog",
                   "--include_clean", "--batch_size=4", "--orderings=2",
                   f"--output_dir={out}"])
  assert code == 0, capsys.readouterr().err
  assert "| contrast" in capsys.readouterr().out
  doc = json.loads((out / "results.json").read_text())
  assert doc["command"].startswith("forge_tflm eval --artifact=")
  assert set(doc["results"]) == {"source", "forge", "bn-adapt"}
  assert set(doc["results"]["forge"]["streams"]) == {"clean", "contrast", "fog"}
  assert len(doc["results"]["forge"]["streams"]["fog"]["accuracy"]) == 2
  assert doc["streams"] == {"clean": 18, "contrast": 18, "fog": 18}
  for ext in ("csv", "md", "png"):
    assert (out / f"results.{ext}").exists()


def test_eval_errors(setup, capsys, tmp_path):
  d, _, data_dir = setup
  assert cli.main(["forge_tflm", "eval", f"--data_dir={data_dir}",
                   f"--output_dir={tmp_path}"]) == 1
  assert "--artifact" in capsys.readouterr().err
  assert cli.main(["forge_tflm", "eval", f"--artifact={d / 'tiny.tflite'}",
                   "--methods=forge,magic", f"--data_dir={data_dir}",
                   f"--output_dir={tmp_path}"]) == 1
  assert "unknown method" in capsys.readouterr().err


def test_eval_from_cifar_c_directory(setup, capsys, tmp_path):
  d, _, _ = setup
  cdir, arrays, labels = fixtures.write_cifar_c(str(tmp_path), n=8)
  out = tmp_path / "eval"
  code = cli.main(["forge_tflm", "eval", f"--artifact={d / 'tiny.tflite'}",
                   "--corrupted_from=cifar_c", f"--cifar_c_dir={cdir}",
                   "--corruptions=fog,gaussian_noise", "--severity=2", "--batch_size=4",
                   f"--output_dir={out}"])
  assert code == 0, capsys.readouterr().err
  doc = json.loads((out / "results.json").read_text())
  assert doc["streams"] == {"fog": 8, "gaussian_noise": 8}
  assert "severity 2" in doc["data"]


def test_eval_prints_no_framework_logging(setup, tmp_path):
  """A fresh process, as a user runs it, with the float model too: no TensorFlow or
  LiteRT log lines (LiteRT's "Created TensorFlow Lite XNNPACK delegate" included)."""
  import os
  import re
  import subprocess
  import sys
  d, src, data_dir = setup
  argv = [sys.executable, "-m", "forge_tflm.cli.main", "eval",
          f"--artifact={d / 'tiny.tflite'}", f"--keras_model={src}",
          f"--data_dir={data_dir}", "--methods=source,forge,bn-adapt",
          "--corruptions=fog", "--batch_size=4", f"--output_dir={tmp_path / 'e'}"]
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  noise = re.findall(r"^[IWE]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \w+\.cc:\d+\]|XNNPACK|oneDNN",
                     r.stdout + r.stderr, re.M)
  assert not noise, r.stderr[-3000:]
  assert "| fog" in r.stdout


@pytest.mark.parametrize("protocol,label_order,stream", [
    ("continual", "dirichlet", "continual"), ("mixed", "sorted", "mixed"),
    ("gradual", "shuffled", "gradual_fog")])
def test_eval_field_protocols_from_one_command(setup, capsys, tmp_path, protocol,
                                               label_order, stream):
  d, src, data_dir = setup
  out = tmp_path / "eval"
  code = cli.main(["forge_tflm", "eval", f"--artifact={d / 'tiny.tflite'}",
                   f"--keras_model={src}", f"--data_dir={data_dir}",
                   "--methods=source,forge,bn-adapt", "--corruptions=contrast,fog",
                   f"--protocol={protocol}", f"--label_order={label_order}",
                   "--dirichlet_alpha=0.01", "--batch_size=4", "--orderings=2",
                   f"--output_dir={out}"])
  assert code == 0, capsys.readouterr().err
  doc = json.loads((out / "results.json").read_text())
  assert stream in doc["results"]["forge"]["streams"]
  domains = doc["domains"][stream]["forge"]
  want = ({"severity_1", "severity_2", "severity_3", "severity_4", "severity_5"}
          if protocol == "gradual" else {"contrast", "fog"})
  assert set(domains) == want and all(len(v) == 2 for v in domains.values())
  assert f"protocol {protocol}" in doc["data"]
  assert "per domain" in (out / "results.md").read_text()


def test_eval_gate_decisions_are_printed_and_saved(setup, capsys):
  """The printed table and results.json name each stream's gate decision; with a
  period, the share of images the adapting path predicted and the probes made."""
  d, _, data_dir = setup
  out = d / "eval_gate"
  code = cli.main(["forge_tflm", "eval", f"--artifact={d / 'tiny.tflite'}",
                   f"--data_dir={data_dir}", "--methods=source,forge-gated",
                   "--gate_probe_images=4", "--corruptions=contrast", "--batch_size=4",
                   f"--output_dir={out}"])
  assert code == 0, capsys.readouterr().err
  assert "| contrast (gate: o" in capsys.readouterr().out
  periodic = d / "eval_gate_periodic"
  code = cli.main(["forge_tflm", "eval", f"--artifact={d / 'tiny.tflite'}",
                   f"--data_dir={data_dir}", "--methods=source,forge-gated",
                   "--gate_probe_images=4", "--gate_period=4", "--corruptions=contrast",
                   "--batch_size=4", f"--output_dir={periodic}"])
  assert code == 0, capsys.readouterr().err
  assert "| contrast (gate adapted: " in capsys.readouterr().out
  doc = json.loads((periodic / "results.json").read_text())
  assert doc["config"]["gate"]["period"] == 4
  run = doc["gate"]["periodic"]["contrast"]
  images = doc["streams"]["contrast"]
  assert run["decisions"] == [images // 4]  # A 4-image probe in every whole batch.
  assert 0.0 <= run["adapted"][0] <= 1.0
  assert run["probed"] == [1.0]  # Every batch probed (each decides the next).


@pytest.mark.parametrize("executor", ["processes", "ray"])
def test_eval_results_do_not_depend_on_the_executor(setup, capsys, executor):
  if executor == "ray":
    pytest.importorskip("ray")
  d, src, data_dir = setup
  docs = {}
  for kind in ("inline", executor):
    out = d / f"exec_{kind}"
    code = cli.main(["forge_tflm", "eval", f"--artifact={d / 'tiny.tflite'}",
                     f"--data_dir={data_dir}", "--methods=source,forge,forge-gated",
                     "--corruptions=contrast,fog,snow", "--protocol=reset_each_shift",
                     "--label_order=dirichlet", "--dirichlet_alpha=0.1",
                     "--batch_size=4", "--orderings=2", "--gate_probe_images=4",
                     f"--executor={kind}", "--workers=2", f"--output_dir={out}"])
    assert code == 0, capsys.readouterr().err
    docs[kind] = json.loads((out / "results.json").read_text())
  assert docs[executor]["results"] == docs["inline"]["results"]
  assert docs[executor]["gate"] == docs["inline"]["gate"]
  assert sorted(os.listdir(d / f"exec_{executor}" / "streams")) == sorted(
      os.listdir(d / "exec_inline" / "streams"))
