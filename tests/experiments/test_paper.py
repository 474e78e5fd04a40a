"""The report's paper section: every "ours" is read from its result file."""

import json
import os
import re
import shutil

from forge_tflm.experiments import paper, report

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Rows that link a file but whose number the experiment does not record.
UNMEASURED = {("tab:abl-bits", "clean accuracy 8/8, 6/6, 4/8, 4/4"),
              ("tab:lotv", "implied 1/std scaling error at batch 1 / 64 (%)")}


def row(claim):
  return next(r for r in paper.ROWS if r.claim == claim)


def line(lines, claim):
  return next(l for l in lines if l.startswith(f"| {row(claim).table} | {claim} |"))


def test_every_sourced_row_reads_its_value_from_a_committed_file():
  for r in paper.ROWS:
    # No figure typed in: ours is a reader or nothing.
    assert r.ours is None or isinstance(r.ours, paper.Ours), r.claim
    if r.ours is None:
      assert not r.source or (r.table, r.claim) in UNMEASURED, r.claim
      continue
    assert r.source, r.claim
    for value in r.ours.values:
      assert os.path.exists(os.path.join(ROOT, value.file)), (r.claim, value.file)
    assert not r.ours.render(ROOT).startswith("missing"), r.claim


def test_the_committed_report_shows_what_the_files_say():
  # Re-run `forge_tflm report` after a result changes; this fails until then.
  with open(os.path.join(ROOT, "results", "REPORT.md")) as f:
    committed = f.read().splitlines()
  for l in paper.markdown(ROOT):
    if l.startswith("| ") and not l.startswith("| table"):
      assert l in committed, l


def copy(tmp_path, rel):
  (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
  shutil.copy(os.path.join(ROOT, rel), tmp_path / rel)
  return tmp_path / rel


def test_a_changed_result_file_changes_the_row(tmp_path):
  copy(tmp_path, "results/baselines/result.md")  # the report's own section reads it
  baselines = copy(tmp_path, "results/baselines/result.json")
  doc = json.loads(baselines.read_text())
  doc["results"]["summary"]["forge"]["mean_accuracy"] = 99.94
  baselines.write_text(json.dumps(doc))
  memory = copy(tmp_path, "benchmarks/results/mcu_memory.md")
  # The an386 21-site row's state cell, whatever the other cells hold today.
  text, n = re.subn(r"^(\| an386 \| FORGE, 21 sites \|[^|]*\|[^|]*\| )6,272 \|",
                    r"\g<1>1,234 |", memory.read_text(), flags=re.M)
  assert n == 1
  memory.write_text(text)
  lines = report.build_report(str(tmp_path / "results")).splitlines()
  forge = doc["results"]["summary"]["forge"]  # Only the accuracy was edited.
  assert (f"| 99.9 / {forge['mean_recovery']:+.1f} ({forge['mean_recovery_std']:.2f}) |"
          in line(lines, "FORGE: accuracy / recovery (std, 5 orderings)"))
  assert "| 1,234 B / 896 B |" in line(lines, "running mean + var (SRAM), 21 sites / top-3")
  # Files not copied read as missing, naming the file, instead of failing the report.
  assert "| missing (results/per-corruption/result.json) |" in line(lines, "mean: source / BN-adapt / TENT / FORGE")


def test_a_missing_value_names_its_file(tmp_path):
  copy(tmp_path, "results/gate/result.json").write_text('{"results": {}}')
  assert row("CIFAR-10-C: ungated (hurt) / fires / gated (hurt)").ours.render(str(tmp_path)) == \
      "missing (results/gate/result.json)"
  assert paper.table_cell("| a | b |\n| --- | --- |\n| x | 1 |\n", ("x",), "b") == "1"


def test_the_energy_row_reads_each_board_from_its_section(tmp_path):
  energy = row("inference / inference + adapt / overhead (ms)")
  cost = copy(tmp_path, "benchmarks/results/mcu_cost.txt")
  copy(tmp_path, "benchmarks/results/esp32s3_cost.txt")
  # The 21-site row's "vs plain" cell, in each board's section (an386 first, an547 next).
  text, n = re.subn(r"^(\| FORGE, 21 sites \|(?:[^|]*\|){3}) \+[0-9.]+% \|", r"\g<1> +9.9% |",
                    cost.read_text(), count=1, flags=re.M)
  assert n == 1
  cost.write_text(text)
  assert energy.ours.render(str(tmp_path)).endswith("; Cortex-M4F +9.9%")
  # The M4F figure is the an386 section's: with that section gone it is missing, not the M55's.
  cost.write_text(text.replace("## an386", "## gone"))
  assert energy.ours.render(str(tmp_path)) == "missing (benchmarks/results/mcu_cost.txt)"


def test_rows_with_targets_show_the_recorded_design_read_from_its_files():
  # Where a figure is FORGE's, the paper's design stands beside it: read from the
  # recorded-target run (results/recorded_targets/), or "= ours" when the experiment
  # itself ran with recorded targets (its result.json says so).
  lines = paper.markdown(ROOT)
  recorded = lambda claim: line(lines, claim).split(" | ")[4]
  baselines = json.load(open(os.path.join(ROOT, "results/recorded_targets/baselines/result.json")))
  assert baselines["targets"] == "recorded"
  twin = baselines["results"]["summary"]["forge"]["mean_recovery"]
  assert f"{twin:+.1f}" in recorded("FORGE: accuracy / recovery (std, 5 orderings)")
  momentum = json.load(open(os.path.join(ROOT, "results/momentum/result.json")))
  expected = "= ours" if momentum["targets"] == "recorded" else "not run"
  assert recorded("recovery at m = 0.01 / 0.03 / 0.1 / 0.3 / 1.0").startswith(expected)
  assert recorded("source (fp32) accuracy") == ""


def test_every_result_names_its_targets():
  for folder in ("results", "results/recorded_targets"):
    for name in os.listdir(os.path.join(ROOT, folder)):
      path = os.path.join(ROOT, folder, name, "result.json")
      if os.path.exists(path):
        targets = json.load(open(path))["targets"]
        assert targets in ("measured", "recorded"), (path, targets)
        assert (targets == "recorded") or folder == "results", path
