"""forge_tflm report: the comparison table, explanations, missing experiments."""

import json

from forge_tflm.cli import main as cli
from forge_tflm.experiments import report


def write(root, name, comparisons, md="# t: title\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n"):
  d = root / name
  d.mkdir(parents=True)
  (d / "result.json").write_text(json.dumps({
      "command": f"forge_tflm experiment {name}", "seconds": 3.0, "executor": "inline",
      "versions": {"git_commit": "abc"}, "results": {"comparisons": comparisons}}))
  (d / "result.md").write_text(md)


def test_differences_over_two_points_need_an_explanation(tmp_path, monkeypatch):
  write(tmp_path, "selective", [{"claim": "share (%)", "paper": 93.0, "here": 66.0},
                                {"claim": "close", "paper": 18.4, "here": 17.0}])
  write(tmp_path, "lotv", [{"claim": "b1 (%)", "paper": 7.96, "here": 12.0}])
  monkeypatch.setitem(report.EXPLANATIONS, ("lotv", "b1 (%)"), "because of X")
  text = report.build_report(str(tmp_path))
  assert "| selective | share (%) | 93 | 66.00 | -27.00 | **unexplained** |" in text
  assert "| selective | close | 18.4 | 17.00 | -1.40 |  |" in text
  assert "| lotv | b1 (%) | 7.96 | 12.00 | +4.04 | because of X |" in text
  assert "## t: title" in text and "| a | b |" in text
  assert "## Not run yet" in text and "momentum" in text


def test_command_writes_report(tmp_path, capsys):
  write(tmp_path, "gate", [])
  assert cli.main(["forge_tflm", "report", f"--results_dir={tmp_path}"]) == 0
  assert (tmp_path / "REPORT.md").read_text().startswith("# forge_tflm: the paper's")
  assert cli.main(["forge_tflm", "report", f"--results_dir={tmp_path / 'none'}"]) == 1
  assert "is not a directory" in capsys.readouterr().err
