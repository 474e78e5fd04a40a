"""The README's main job prints what the README says (issue 51).

benchmarks/main_job.py ran the README's commands as written and committed what the eval
printed and how long it took (benchmarks/results/main_job.md). Here: the README's
figures are that file's, and the README's eval command, run again on a reduced stream
(two of its corruptions), prints exactly that file's rows for them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from benchmarks.main_job import flag, readme_main_job
from tests.conftest import REPO_ROOT

RESULT = os.path.join(REPO_ROOT, "benchmarks", "results", "main_job.md")
REDUCED = ("gaussian_noise", "contrast")


def _result() -> str:
  with open(RESULT) as f:
    return f.read()


def _row(table: str, stream: str) -> str:
  return next(line for line in table.splitlines() if line.startswith(f"| {stream}"))


def _readme() -> str:
  with open(os.path.join(REPO_ROOT, "README.md")) as f:
    return f.read()


def test_result_file_ran_the_readme_commands():
  listed = [line.strip() for line in _result().splitlines() if line.startswith("    forge_tflm")]
  assert listed == [" ".join(argv) for argv in readme_main_job()]


def test_readme_figures_are_the_result_files():
  result = _result()
  total = int(re.search(r"\| \*\*total\*\* \| (\d+) \|", result).group(1))
  means = re.findall(r"(\d+\.\d)(?: \(([+-]\d+\.\d))?",
                     _row(result, "**mean (corrupted)**").split("|", 2)[2])
  source, (forge, forge_gain), (gated, gated_gain) = means[0][0], means[1], means[2]
  text = " ".join(_readme().split()).lower()
  ratio = re.search(r"\| \*\*ratio eval / plain\*\* \| (\d\.\d+) \|", result).group(1)
  assert f"about {total} s ({round(total / 60)} minutes) on 2 cpu cores" in text
  assert f"the eval at {ratio}x plain litert's images per second" in text
  assert (f"int8 source {source}% -> forge {forge}% ({forge_gain}), gated forge"
          f" {gated}% ({gated_gain})") in text


def test_readme_eval_on_a_reduced_stream_prints_the_result_files_rows(tmp_path):
  from tests.deploy import test_cortexm as cm

  if not os.path.isdir(cm.DATA_DIR):
    pytest.skip(f"needs CIFAR-10 at {cm.DATA_DIR}")
  convert, evaluate = readme_main_job()
  # The deploy tests' conversion is the README's: same model, data, flags.
  assert sorted(a.split("=")[0] for a in convert[2:]) == [
      "--data_dir", "--model", "--output", "--plain_output"]
  for name, path in (("model", cm.MODEL), ("data_dir", cm.DATA_DIR)):
    assert os.path.realpath(os.path.join(REPO_ROOT, flag(convert, name))) == \
        os.path.realpath(path)
  artifact = cm.artifact_paths()["forge_all"]
  argv = [a for a in evaluate[1:] if not a.startswith(("--artifact=", "--output_dir="))]
  cmd = [sys.executable, "-m", "forge_tflm.cli.main"] + argv + [
      f"--artifact={artifact}", f"--output_dir={tmp_path / 'eval'}",
      f"--corruptions={','.join(REDUCED)}"]
  r = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
  assert r.returncode == 0, r.stderr[-3000:]
  for stream in REDUCED:
    assert _row(r.stdout, stream) == _row(_result(), stream)
