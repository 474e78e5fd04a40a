"""The gate's default rule on models it was not tuned on: does it hurt any corruption?

The gate's defaults (signal, probe length, margin, label-correlation veto) were chosen
on the bundled ResNet-20. This converts the bundled MobileNetV2-0.5 and a PyTorch model
(an ONNX file, e.g. from benchmarks/train_torch_resnet20.py) with `forge_tflm convert`,
evaluates source, FORGE and the gated FORGE (defaults, re-probing every
--gate_period images) on shuffled streams, and lists every corruption where the gated
FORGE is more than --tolerance points under the int8 source.

    python benchmarks/gate_other_models.py --data_dir=../shared/datasets/cifar10 \\
        --onnx=runs/torch_r20/model.onnx --output=benchmarks/results/gate_other_models.md
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


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--data_dir", required=True)
  ap.add_argument("--keras", default=os.path.join(REPO_ROOT, "models",
                                                  "mobilenet_v2_0.5_cifar10.keras"))
  ap.add_argument("--onnx", default=None, help="a PyTorch model exported to ONNX "
                  "(raw-pixel input: the normalization inside the model)")
  ap.add_argument("--limit", type=int, default=2000)
  ap.add_argument("--batch_size", type=int, default=64)
  ap.add_argument("--orderings", type=int, default=3)
  ap.add_argument("--gate_period", type=int, default=1024)
  ap.add_argument("--tolerance", type=float, default=0.5)
  ap.add_argument("--label_order", default="shuffled", help="forge_tflm eval --label_order")
  ap.add_argument("--executor", default="inline", help="forge_tflm eval --executor")
  ap.add_argument("--output", default=None)
  args = ap.parse_args(argv)
  from forge_tflm.cli.main import main as cli

  models = [("MobileNetV2-0.5 (Keras, bundled)", args.keras, [])]
  if args.onnx:
    models.append(("PyTorch ResNet-20 via ONNX", args.onnx, ["--input_range=0,255"]))
  rows, t0 = [], time.time()
  with tempfile.TemporaryDirectory() as tmp:
    for k, (label, path, convert_flags) in enumerate(models):
      artifact = os.path.join(tmp, f"m{k}.tflite")
      if cli(["forge_tflm", "convert", f"--model={path}", f"--data_dir={args.data_dir}",
              f"--output={artifact}"]
             + convert_flags):
        raise SystemExit(f"{label}: forge_tflm convert failed")
      out = os.path.join(tmp, f"eval{k}")
      if cli(["forge_tflm", "eval", f"--artifact={artifact}", f"--data_dir={args.data_dir}",
              "--methods=source,forge,forge-gated", f"--limit={args.limit}",
              f"--batch_size={args.batch_size}", f"--orderings={args.orderings}",
              f"--gate_period={args.gate_period}", f"--output_dir={out}",
              f"--label_order={args.label_order}", f"--executor={args.executor}"]):
        raise SystemExit(f"{label}: forge_tflm eval failed")
      with open(os.path.join(out, "results.json")) as f:
        doc = json.load(f)
      acc = {m: {s: r["accuracy_mean"] for s, r in doc["results"][m]["streams"].items()}
             for m in ("source", "forge", "forge-gated")}
      adapted = {s: float(np.mean(v["adapted"]))
                 for s, v in doc["gate"].get("periodic", {}).items()}
      rows.append((label, acc, adapted))

  lines = [f"# {datetime.date.today()}: python benchmarks/gate_other_models.py "
           f"{' '.join(argv if argv is not None else sys.argv[1:])}",
           f"# {args.limit} test images per corruption, severity 5, batch {args.batch_size}, "
           f"{args.orderings} orderings, {args.label_order} streams; gate: defaults,"
           " --gate_period="
           f"{args.gate_period}; hurt = more than {args.tolerance:g} point under the int8 "
           "source", "",
           "| model | int8 source | FORGE | FORGE + gate | corruptions the gate hurts | "
           "worst gate vs source |", "| --- | ---: | ---: | ---: | --- | ---: |"]
  details = []
  for label, acc, adapted in rows:
    src = acc["source"]
    hurt = [s for s in src if acc["forge-gated"][s] < src[s] - args.tolerance]
    worst = min(acc["forge-gated"][s] - src[s] for s in src)
    lines.append(f"| {label} | {np.mean(list(src.values())):.1f} | "
                 f"{np.mean(list(acc['forge'].values())):.1f} | "
                 f"{np.mean(list(acc['forge-gated'].values())):.1f} | "
                 f"{', '.join(hurt) or 'none'} | {worst:+.1f} |")
    details += ["", f"{label}, per corruption (source / FORGE / gate, share adapted):", ""]
    details += [f"- {s}: {src[s]:.1f} / {acc['forge'][s]:.1f} / {acc['forge-gated'][s]:.1f}"
                f" ({adapted.get(s, float('nan')):.0%})" for s in src]
  lines += details + ["", f"# total {time.time() - t0:.0f} s"]
  emit("\n".join(lines) + "\n", args.output)
  return 0


if __name__ == "__main__":
  sys.exit(main())
