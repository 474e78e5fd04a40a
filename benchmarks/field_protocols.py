"""FORGE under field protocols: i.i.d., label-correlated and continual streams.

Runs `forge_tflm eval` (methods source, forge) on the same artifact and data for each
stream order below and prints one table: mean accuracy over the 15 corruptions
(severity 5) and how many corruptions FORGE hurts against the int8 source.

    python benchmarks/field_protocols.py --artifact=runs/r20_forge.tflite \\
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

SETTINGS = (("shuffled (reset each shift)", ["--protocol=reset_each_shift"]),
            ("Dirichlet alpha = 0.1", ["--label_order=dirichlet", "--dirichlet_alpha=0.1"]),
            ("Dirichlet alpha = 0.01", ["--label_order=dirichlet", "--dirichlet_alpha=0.01"]),
            ("sorted by class", ["--label_order=sorted"]),
            ("continual: 15 corruptions back to back, no reset", ["--protocol=continual"]))


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--artifact", required=True)
  ap.add_argument("--data_dir", required=True)
  ap.add_argument("--limit", type=int, default=2000)
  ap.add_argument("--batch_size", type=int, default=64)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--output", default=None)
  args = ap.parse_args(argv)
  from forge_tflm.cli.main import main as cli

  rows, t0 = [], time.time()
  with tempfile.TemporaryDirectory() as tmp:
    for k, (label, extra) in enumerate(SETTINGS):
      out = os.path.join(tmp, str(k))
      code = cli(["forge_tflm", "eval", f"--artifact={args.artifact}",
                  f"--data_dir={args.data_dir}", "--methods=source,forge",
                  f"--limit={args.limit}", f"--batch_size={args.batch_size}",
                  f"--seed={args.seed}", f"--output_dir={out}"] + extra)
      if code:
        raise SystemExit(f"{label}: forge_tflm eval exited {code}")
      with open(os.path.join(out, "results.json")) as f:
        doc = json.load(f)
      if "continual" in doc.get("domains", {}):
        dom = doc["domains"]["continual"]
        src = 100 * np.mean([np.mean(v) for v in dom["source"].values()])
        frg = 100 * np.mean([np.mean(v) for v in dom["forge"].values()])
        hurt = sum(np.mean(dom["forge"][d]) < np.mean(dom["source"][d]) for d in dom["forge"])
      else:
        r = doc["results"]
        src, frg = r["source"]["summary"]["mean_accuracy"], r["forge"]["summary"]["mean_accuracy"]
        hurt = len(r["forge"]["summary"].get("hurt", []))
      rows.append((label, src, frg, hurt, doc["wall_seconds"]))
  lines = [f"# {datetime.date.today()}: python benchmarks/field_protocols.py "
           f"{' '.join(argv if argv is not None else sys.argv[1:])}",
           f"# {args.limit} test images per corruption, severity 5, batch {args.batch_size}, "
           f"seed {args.seed}, one ordering; this package's corruptions; FORGE as converted "
           "(window 640, no label-correlation defence)", "",
           "| stream order | int8 source | FORGE | corruptions FORGE hurts | eval s |",
           "| --- | ---: | ---: | ---: | ---: |"]
  lines += [f"| {label} | {src:.1f} | {frg:.1f} | {hurt}/15 | {secs:.0f} |"
            for label, src, frg, hurt, secs in rows]
  lines += ["", f"# total {time.time() - t0:.0f} s"]
  emit("\n".join(lines) + "\n", args.output)
  return 0


if __name__ == "__main__":
  sys.exit(main())
