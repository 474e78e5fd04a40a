"""The field controller's trade-off with its label-correlation detector on and off: one
table from the field_protocols.py results named field_settings_<model>_<on|off>[_bs1][_all].md
(_all: the whole test split per corruption, --limit=0).

Reads every such file present in --results_dir (nothing is measured here; every number
is parsed from those tables) and prints one row per model x batch size x stream order:
the int8 source and ungated FORGE accuracy, and for each detector setting the gated
FORGE's accuracy, its hurts (corruptions more than 1 point under the int8 source, of 15)
with the worst gate-minus-source difference, and (shuffled rows) the recovery it kept.
"on" is the default (`--gate_label_window=4096`), "off" `--gate_label_window=0`.

    python benchmarks/field_protocols.py --artifact=runs/r20_forge.tflite \\
        --data_dir=../shared/datasets/cifar10 --limit=2000 --orderings=1 \\
        --settings=0,1,2,3,4 [--gate_label_window=0] [--batch_size=1] \\
        --output=benchmarks/results/field_settings_r20_<on|off>[_bs1].md
    python benchmarks/field_settings.py --output=benchmarks/results/field_settings.md
"""

from __future__ import annotations

import argparse
import os
import re
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks._report import command_line, dated, emit  # noqa: E402

MODELS = {"r20": "ResNet-20", "mnv2": "MobileNetV2-0.5", "r8": "ResNet-8 (MLPerf Tiny)"}
NAME = re.compile(r"^field_settings_(?P<model>[a-z0-9]+)_(?P<detector>on|off)"
                  r"(?P<bs1>_bs1)?(?P<all>_all)?\.md$")
DETECTORS = ("on", "off")


def parse(path: str) -> dict:
  """{'batch': int, 'images': images per corruption (0: the whole split), 'rows': [(stream
  order, {column: cell})]} from one field_protocols.py result file."""
  with open(path) as f:
    text = f.read()
  batch = re.search(r"severity 5, batch (\d+),", text)
  images = re.search(r"^# (\d+|all) test images per corruption", text, re.M)
  header, rows = None, []
  for line in text.splitlines():
    if not line.startswith("|"):
      continue
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if header is None:  # the second 'hurts' (the gate's) as 'hurts, gated'
      header = [c + ", gated" if c in cells[:i] else c for i, c in enumerate(cells)]
    elif not all(set(c) <= set("-: ") for c in cells):
      rows.append((cells[0], dict(zip(header, cells))))
  if header is None or batch is None or images is None:
    raise SystemExit(f"{path}: not a field_protocols.py table")
  return {"batch": int(batch.group(1)), "rows": rows,
          "images": 0 if images.group(1) == "all" else int(images.group(1))}


def gated(cells: dict) -> tuple[str, str, str]:
  """(gated accuracy, hurts with the worst difference, recovery kept) of one row."""
  return (cells["FORGE + gate"],
          f"{cells['hurts, gated']} ({cells['worst gate vs source']})",
          cells["recovery kept"] or "")


def table(results_dir: str) -> tuple[list[str], list[str]]:
  found: dict = {}
  sources = []
  for name in sorted(os.listdir(results_dir)):
    m = NAME.match(name)
    if not m:
      continue
    doc = parse(os.path.join(results_dir, name))
    sources.append(name)
    found[(m["model"], doc["batch"], doc["images"], m["detector"])] = doc
  head = ("| model | batch | images per corruption | stream order | int8 source | FORGE | "
          "gated, detector on | hurts (worst) | kept | gated, detector off | hurts (worst) "
          "| kept |")
  lines = [head, "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
           "| ---: |"]
  order = {k: i for i, k in enumerate(MODELS)}
  keys = sorted({(mod, b, n) for mod, b, n, _ in found},
                key=lambda k: (order.get(k[0], len(order)), k[0], -k[1], k[2] or 10**9))
  for mod, batch, images in keys:
    docs = {d: found.get((mod, batch, images, d)) for d in DETECTORS}
    streams = []
    for d in DETECTORS:
      for label, _ in (docs[d] or {"rows": []})["rows"]:
        if label not in streams:
          streams.append(label)
    for label in streams:
      per = {d: dict(docs[d]["rows"]).get(label) if docs[d] else None for d in DETECTORS}
      base = []
      for col in ("int8 source", "FORGE"):
        vals = []
        for d in DETECTORS:
          if per[d] is not None and per[d][col] not in vals:
            vals.append(per[d][col])
        base.append(" / ".join(vals))  # the two runs' cells if they ever differ
      cells = []
      for d in DETECTORS:
        cells += list(gated(per[d])) if per[d] is not None else ["not run", "", ""]
      n = f"{images:,}" if images else "whole split"
      lines.append("| " + " | ".join([MODELS.get(mod, mod), str(batch), n, label, *base,
                                      *cells]) + " |")
  return lines, sources


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--results_dir", default=os.path.join(REPO_ROOT, "benchmarks", "results"))
  ap.add_argument("--output", default=None)
  args = ap.parse_args(argv)
  lines, sources = table(args.results_dir)
  if not sources:
    raise SystemExit(f"no field_settings_<model>_<on|off>[_bs1][_all].md in "
                     f"{args.results_dir}")
  report = [
      dated(command_line("field_settings.py", argv)) + " (from " + ", ".join(sources) + ")",
      "# the gated FORGE (forge-gated) with its label-correlation detector on (default, "
      "--gate_label_window=4096) and off (--gate_label_window=0); hurts = corruptions "
      "more than 1 point under the int8 source, of 15, with the worst gate-minus-source "
      "difference (points); kept = the gate's share of FORGE's recovery over the int8 "
      "source on shuffled streams; settings as each source file's header states",
      "", *lines]
  emit("\n".join(report) + "\n", args.output)
  return 0


if __name__ == "__main__":
  sys.exit(main())
