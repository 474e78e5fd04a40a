"""`forge_tflm report`: every experiment's results in one results/REPORT.md.

For each experiment in EXPERIMENTS: whether and how it was run (its command and
date), its headline table (result.md's first table) and figure, and every number
it compares with the paper (`comparisons` in result.json) in one table, where a
difference over DIFFERENCE_THRESHOLD points carries its explanation
(EXPLANATIONS, written after reading the results) or is marked unexplained.
"""

from __future__ import annotations

import json
import os

from forge_tflm.experiments import paper
from forge_tflm.experiments.common import EXPERIMENTS

DIFFERENCE_THRESHOLD = 2.0

# (experiment, claim) -> why our number differs from the paper's by more than
# DIFFERENCE_THRESHOLD points. Written from the committed results; the report marks
# any larger difference without an entry as unexplained.
# Why every recovery here is lower than the paper's (the report's preamble).
_LEVEL_TEXT = (
    "**Recovery level.** Every recovery measured here is about two thirds of the"
    " paper's, for every method alike: all 21 sites {:+.1f} vs +18.4, and in `baselines`"
    " (same streams) FORGE with the paper's recorded BN targets {:+.1f}, the fp32 BN-adapt"
    " {:+.1f} and TENT {:+.1f} (FORGE with the default measured targets: {:+.1f}). So the"
    " difference lies in the setting, not in FORGE: the bundled ResNet-20's int8 source"
    " holds 62.9-63.2% on these corruptions against the paper's 50.4%, and a stronger"
    " source leaves less to win back (the section \"The paper, table by table\"). Where"
    " the level is the only difference the explanation says \"level\" and gives the"
    " relation that does carry over.")


def level_note() -> paper.Ours:
  """The report's preamble, its figures read from the result files."""
  recovery = "mean_recovery"
  return paper.ours(_LEVEL_TEXT,
                    paper.Json("results/selective/result.json",
                               ("results", "all_sites_recovery")),
                    paper.baseline("forge", recovery, paper.RECORDED + "baselines/result.md"),
                    paper.baseline("bn-adapt", recovery), paper.baseline("tent", recovery),
                    paper.baseline("forge", recovery))
EXPLANATIONS: dict[tuple[str, str], str] = {
    ("selective", "held-out top-3: share of all-site recovery (%)"):
        "Higher than the paper: here the two convs of stage 2's first block and the"
        " first conv of stage 3 (ranked 1-3 on held-out and on evaluation corruptions"
        " alike) recover as much as all 21 sites; more sites help up to k = 7-12"
        " (+15.0) and then cost again.",
    ("selective", "best held-out subset: recovery (points)"):
        "Level. Relation kept: the best subset chosen without evaluation data beats all"
        " sites (+14.1 with 13 vs +13.2 with 21; paper +19.6 with 8 vs +18.4 with 21).",
    ("selective", "all sites: recovery (points)"): "Level.",
    ("gap", "kept-BN int8 model, forward-only BN recalibration: recovery (points)"):
        "Level. Relation kept: recalibrating a kept BN (+12.6) and FORGE on the folded"
        " model (+12.4) recover the same within 0.2 point (paper +20.1 and +20.9), and"
        " the folded model alone recovers nothing.",
    ("gap", "FORGE on the folded model: recovery (points)"):
        "Level. Relation kept: as recalibrating a kept BN, within 0.2 point.",
}


def _first_table(markdown: str) -> str:
  lines = markdown.splitlines()
  start = next((i for i, l in enumerate(lines) if l.startswith("| ")), None)
  if start is None:
    return ""
  end = start
  while end < len(lines) and lines[end].startswith("|"):
    end += 1
  return "\n".join(lines[start:end])


def build_report(results_dir: str) -> str:
  # The paper section reads files across the repo (results/, benchmarks/results/,
  # models/): the repo is the folder that holds results_dir.
  root = os.path.dirname(os.path.abspath(results_dir))
  sections, comparisons, missing = [], [], []
  for name in EXPERIMENTS:
    path = os.path.join(results_dir, name, "result.json")
    if not os.path.exists(path):
      missing.append(name)
      continue
    with open(path) as f:
      doc = json.load(f)
    with open(os.path.join(results_dir, name, "result.md")) as f:
      md = f.read()
    title = next((l[2:] for l in md.splitlines() if l.startswith("# ")), name)
    sections += [f"## {title}", "",
                 f"`{doc['command']}` ({doc['seconds']:.0f} s, {doc['executor']} executor,"
                 f" commit {doc['versions'].get('git_commit', '?')[:10]}, targets:"
                 f" {doc.get('targets') or '-'}); details:"
                 f" [{name}/result.md]({name}/result.md)", "", _first_table(md), ""]
    if os.path.exists(os.path.join(results_dir, name, "result.png")):
      sections += [f"![{name}]({name}/result.png)", ""]
    for c in doc["results"].get("comparisons", []):
      comparisons.append((name, c))
  lines = ["# forge_tflm: the paper's experiments, measured here", "",
           "Generated by `forge_tflm report` from results/*/result.json and the paper's"
           " tables (forge_tflm/experiments/paper.py); each experiment's own command is"
           " named in its section. Which result files are current:"
           " [INDEX.md](INDEX.md).", "", level_note().render(root), ""] + paper.markdown(root) + [
           "## Against the paper: the experiments' own comparisons", "",
           "| experiment | claim | paper | here | difference | explanation |",
           "| --- | --- | ---: | ---: | ---: | --- |"]
  for name, c in comparisons:
    diff = c["here"] - c["paper"]
    note = ""
    if abs(diff) > DIFFERENCE_THRESHOLD:
      note = EXPLANATIONS.get((name, c["claim"]), "**unexplained**")
    lines.append(f"| {name} | {c['claim']} | {c['paper']:g} | {c['here']:.2f} |"
                 f" {diff:+.2f} | {note} |")
  if not comparisons:
    lines.append("| | (no experiment with paper numbers has been run) | | | | |")
  lines += [""] + sections
  if missing:
    lines += ["## Not run yet", "", ", ".join(missing) + ": `forge_tflm experiment NAME`.", ""]
  return "\n".join(lines)


def write_report(results_dir: str) -> str:
  from forge_tflm.fileio import atomic_path  # pylint: disable=import-outside-toplevel

  path = os.path.join(results_dir, "REPORT.md")
  text = build_report(results_dir)
  with atomic_path(path, ".md") as tmp:
    with open(tmp, "w") as f:
      f.write(text.rstrip() + "\n")
  return path
