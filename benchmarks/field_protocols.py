"""FORGE, the gate and the fp32 baselines under field protocols (i.i.d., label-correlated,
continual, gradual, mixed streams).

Runs `forge_tflm eval` once per stream order below on the same artifact and data
(methods source, forge, forge-gated with --gate_period, and bn-adapt, tent with
--keras_model) and prints one table. Per corruption the accuracy is the mean over
--orderings presentation orders (3 seeds of the order); a method "hurts" a corruption
when it is more than 1 point under the int8 source there. "kept" is the gated FORGE's
recovery over the int8 source as a share of the ungated FORGE's recovery on the
shuffled (reset-each-shift) streams. Streams that cross domains (continual, gradual,
mixed) are scored per domain inside them.

    python benchmarks/field_protocols.py --artifact=runs/r20_forge.tflite \\
        --keras_model=models/resnet20_cifar10.keras \\
        --data_dir=../shared/datasets/cifar10 --output=benchmarks/results/field_protocols.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks._report import emit  # noqa: E402
from forge_tflm.evaluation import report  # noqa: E402

SHUFFLED = "shuffled (reset each shift)"
CONTINUAL = "continual: 15 corruptions back to back, no reset"
SETTINGS = {
    SHUFFLED: ["--protocol=reset_each_shift"],
    "Dirichlet alpha = 0.1": ["--label_order=dirichlet", "--dirichlet_alpha=0.1"],
    "Dirichlet alpha = 0.01": ["--label_order=dirichlet", "--dirichlet_alpha=0.01"],
    "sorted by class": ["--label_order=sorted"],
    CONTINUAL: ["--protocol=continual"],
    "gradual: severity 1-5-1 per corruption, no reset": ["--protocol=gradual"],
    "mixed: 15 corruptions interleaved image by image": ["--protocol=mixed"],
}


def per_corruption(doc: dict, method: str) -> dict[str, float]:
  """Accuracy (%) per corruption, mean over orderings: per domain inside a stream that
  holds every corruption (continual, mixed), else per stream (a gradual stream is one
  corruption at every severity)."""
  if len(doc.get("domains", {})) == 1:
    (stream,) = doc["domains"].values()
    return {d: 100 * float(np.mean(accs)) for d, accs in stream[method].items()}
  return {s: row["accuracy_mean"]
          for s, row in doc["results"][method]["streams"].items() if s != "clean"}


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--artifact", required=True)
  ap.add_argument("--data_dir", required=True)
  ap.add_argument("--keras_model", default=None, help="adds bn-adapt and tent (fp32)")
  ap.add_argument("--limit", type=int, default=0, help="images per corruption (0: all)")
  ap.add_argument("--batch_size", type=int, default=64)
  ap.add_argument("--orderings", type=int, default=3)
  ap.add_argument("--gate_period", type=int, default=None,
                  help="default: a device's (forge_tflm.evaluation.gate.DEVICE_PERIOD)")
  ap.add_argument("--gate_label_window", type=int, default=None,
                  help="forge_tflm eval --gate_label_window (default: the gate's)")
  ap.add_argument("--gate_probe_images", type=int, default=None,
                  help="forge_tflm eval --gate_probe_images (default: the gate's)")
  ap.add_argument("--settings", default=",".join(str(i) for i in range(len(SETTINGS))),
                  help="indices into the table's rows, comma-separated")
  ap.add_argument("--executor", default="inline", help="forge_tflm eval --executor")
  ap.add_argument("--output", default=None)
  args = ap.parse_args(argv)
  from forge_tflm.cli.main import main as cli
  from forge_tflm.evaluation.gate import DEVICE_PERIOD

  if args.gate_period is None:
    args.gate_period = DEVICE_PERIOD

  methods = ["source", "forge", "forge-gated"]
  if args.keras_model:
    methods += ["bn-adapt", "tent"]
  chosen = [list(SETTINGS)[int(i)] for i in args.settings.split(",")]
  rows, t0 = [], time.time()
  with tempfile.TemporaryDirectory() as tmp:
    for k, label in enumerate(chosen):
      out = os.path.join(tmp, str(k))
      cmd = ["forge_tflm", "eval", f"--artifact={args.artifact}",
             f"--data_dir={args.data_dir}", f"--methods={','.join(methods)}",
             f"--limit={args.limit}", f"--batch_size={args.batch_size}",
             f"--orderings={args.orderings}", f"--gate_period={args.gate_period}",
             f"--output_dir={out}", f"--executor={args.executor}"] + SETTINGS[label]
      if args.gate_label_window is not None:
        cmd.append(f"--gate_label_window={args.gate_label_window}")
      if args.gate_probe_images is not None:
        cmd.append(f"--gate_probe_images={args.gate_probe_images}")
      if args.keras_model:
        cmd.append(f"--keras_model={args.keras_model}")
      code = cli(cmd)
      if code:
        raise SystemExit(f"{label}: forge_tflm eval exited {code}")
      with open(os.path.join(out, "results.json")) as f:
        doc = json.load(f)
      acc = {m: per_corruption(doc, m) for m in methods}
      periodic = doc.get("gate", {}).get("periodic", {})
      probed = [p for s in periodic.values() for p in s.get("probed", [])]
      rows.append((label, acc, float(np.mean(probed)) if probed else float("nan")))
      print(f"{label}: {doc['wall_seconds']:.0f} s", file=sys.stderr, flush=True)

  def mean(d):
    return float(np.mean(list(d.values())))

  def hurts(acc, m):
    return report.hurt_streams({c: acc[m][c] - acc["source"][c] for c in acc["source"]})

  shuffled = dict((label, acc) for label, acc, _ in rows).get(SHUFFLED)
  head = ("| stream order | int8 source | FORGE | hurts | FORGE + gate | hurts | worst "
          "gate vs source | recovery kept | probed |")
  sep = "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  if args.keras_model:
    head += " fp32 BN-adapt | TENT |"
    sep += " ---: | ---: |"
  lines = [f"# {datetime.date.today()}: python benchmarks/field_protocols.py "
           f"{' '.join(argv if argv is not None else sys.argv[1:])}",
           f"# {args.limit or 'all'} test images per corruption, severity 5, batch "
           f"{args.batch_size}, {args.orderings} orderings (seeds of the presentation "
           f"order), this package's corruptions; gate: defaults with --gate_period="
           f"{args.gate_period}"
           + (f" --gate_label_window={args.gate_label_window}"
              if args.gate_label_window is not None else "")
           + (f" --gate_probe_images={args.gate_probe_images}"
              if args.gate_probe_images is not None else "")
           + f"; hurts = corruptions more than {report.HURT_POINTS:g} point under "
           "the int8 source; probed = share of the images the gate ran twice (both paths),"
           " mean over the streams and orderings", "", head, sep]
  for label, acc, probed in rows:
    src, frg, gtd = mean(acc["source"]), mean(acc["forge"]), mean(acc["forge-gated"])
    worst = min(acc["forge-gated"][c] - acc["source"][c] for c in acc["source"])
    kept = ""
    if label == SHUFFLED:
      kept = f"{100 * (gtd - src) / (frg - src):.1f}%" if frg > src else "n/a"
    line = (f"| {label} | {src:.1f} | {frg:.1f} | {len(hurts(acc, 'forge'))}/15 | "
            f"{gtd:.1f} | {len(hurts(acc, 'forge-gated'))}/15 | {worst:+.1f} | {kept} | "
            f"{100 * probed:.1f}% |")
    if args.keras_model:
      line += f" {mean(acc['bn-adapt']):.1f} | {mean(acc['tent']):.1f} |"
    lines.append(line)
  if shuffled is not None:
    for label, acc, _ in rows:
      if label == CONTINUAL:
        lines += ["", f"Continual vs reset-each-shift (mean over the 15 corruptions): FORGE "
                  f"{mean(acc['forge']) - mean(shuffled['forge']):+.2f} points, FORGE + gate "
                  f"{mean(acc['forge-gated']) - mean(shuffled['forge-gated']):+.2f}"
                  + (f", BN-adapt {mean(acc['bn-adapt']) - mean(shuffled['bn-adapt']):+.2f}, "
                     f"TENT {mean(acc['tent']) - mean(shuffled['tent']):+.2f}"
                     if args.keras_model else "") + "."]
  lines += ["", "Hurt by FORGE + gate (gate minus int8 source, points):"]
  for label, acc, _ in rows:
    bad = hurts(acc, "forge-gated")
    lines.append(f"- {label}: " + (", ".join(
        f"{c} {acc['forge-gated'][c] - acc['source'][c]:+.1f}" for c in bad) or "none"))
  lines += ["", f"# total {time.time() - t0:.0f} s"]
  emit("\n".join(lines) + "\n", args.output)
  return 0


if __name__ == "__main__":
  sys.exit(main())
