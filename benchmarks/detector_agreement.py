"""What the controller's label-correlation detector sees from the source model's labels.

For each artifact and corruption (severity 5, --limit images per corruption, seed 0), the
int8 source's predictions (FORGE frozen at its clean targets: they do not depend on the
order) presented shuffled, sorted by class and Dirichlet(0.01) at --batch_size slots:
how often consecutive predictions agree, the class mix's chance of agreeing (sum of the
squared class shares over the stream), and the share of images at which the C
controller's detector (gate defaults, label_window 4096, fed the source's outputs image
by image as during a probe) flags the stream as label-correlated. A shuffled stream
whose source collapses onto few classes agrees as often as a run of one class; the
detector tells them apart only once its class histogram has learned the collapse.
Beside it, the paths the controller chooses between on the shuffled stream (batch 64
whatever --batch_size, state reset per corruption): accuracy and chance of the source, of adapt_safe (the
label-safe sites adapting, the others at their clean targets) and of adapt.

    python benchmarks/detector_agreement.py --data_dir=../shared/datasets/cifar10 \\
        --artifacts=runs/r20_safe.tflite,runs/mnv2_safe.tflite,runs/r8_safe.tflite \\
        --output=benchmarks/results/detector_agreement.md
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks._report import emit, run_head  # noqa: E402

ORDERS = ("shuffled", "sorted", "dirichlet")


def source_outputs(model, x, batch_size=64):
  from forge_tflm.runtime.segmented import SOURCE
  return np.concatenate([model.run(x[i:i + batch_size], mode=SOURCE)
                         for i in range(0, len(x), batch_size)])


def detector_flags(outputs, model) -> float:
  """Share of images after which the controller's detector flags, fed `outputs`."""
  from forge_tflm.evaluation import gate
  scale, zero_point = model.output_quant
  c = gate.Controller(gate.settings(gate.GateConfig()), outputs.shape[-1],
                      scale, zero_point)
  flagged = 0
  for row in outputs:
    one = np.ascontiguousarray(row[None])
    if c.probing:  # Both paths given the source's outputs: only the labels matter here.
      c.probed(one, one, 1)
    else:
      c.ran(one, 1)
    flagged += bool(c.correlated)
  return flagged / len(outputs)


def path_predictions(model, x, mode, batch_size=64):
  model.reset()
  out = np.concatenate([model.run(x[i:i + batch_size], mode=mode)
                        for i in range(0, len(x), batch_size)])
  model.reset()
  return out.reshape(len(out), -1).argmax(-1)


def chance_of(pred, classes) -> float:
  share = np.bincount(pred, minlength=classes) / len(pred)
  return float(np.sum(share * share))


def measure(path, data_dir, limit, batch_size):
  from forge_tflm import deploy
  from forge_tflm.artifact import Artifact
  from forge_tflm.corruptions import CORRUPTIONS
  from forge_tflm.evaluation.field_streams import LabelOrder, presentation_order
  from forge_tflm.runtime.segmented import ADAPT, ADAPT_SAFE, SegmentedModel

  artifact = Artifact.load(path)
  model = SegmentedModel.from_artifact(artifact)
  orders = {"shuffled": LabelOrder("shuffled"), "sorted": LabelOrder("sorted"),
            "dirichlet": LabelOrder("dirichlet", 0.01, batch_size)}
  rows = []
  for name in CORRUPTIONS:
    stream = deploy.corrupted_stream(data_dir, name, 5, limit=limit, seed=0)
    x = deploy.model_input(artifact, stream.images)
    out = source_outputs(model, x)
    pred = out.reshape(len(out), -1).argmax(-1)
    row = {"corruption": name, "accuracy": float(np.mean(pred == stream.labels)),
           "chance": chance_of(pred, out.shape[-1])}
    for mode in (ADAPT_SAFE, ADAPT):
      p = path_predictions(model, x, mode)
      row[f"accuracy_{mode}"] = float(np.mean(p == stream.labels))
      row[f"chance_{mode}"] = chance_of(p, out.shape[-1])
    # The source's outputs do not depend on the order: in the clean subset's order,
    # then presented as `forge_tflm eval --label_order` presents ordering 0.
    clean_out = np.empty_like(out)
    clean_out[stream.order] = out
    clean_labels = np.empty_like(stream.labels)
    clean_labels[stream.order] = stream.labels
    for kind, order in orders.items():
      k = presentation_order(order, clean_labels, 0, 0)
      p = clean_out[k].reshape(len(k), -1).argmax(-1)
      row[f"agree_{kind}"] = float(np.mean(p[1:] == p[:-1]))
      row[f"flag_{kind}"] = detector_flags(clean_out[k].reshape(len(k), -1), model)
    rows.append(row)
  return rows


def table(path, rows) -> list[str]:
  lines = [f"### {os.path.basename(path)}", "",
           "| corruption | source accuracy | chance (sum of shares^2) | agreement: shuffled "
           "| sorted | Dirichlet 0.01 | flagged: shuffled | sorted | Dirichlet 0.01 |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
  for r in rows:
    lines.append(f"| {r['corruption']} | {100 * r['accuracy']:.1f} | {r['chance']:.3f} | " +
                 " | ".join(f"{r['agree_' + k]:.3f}" for k in ORDERS) + " | " +
                 " | ".join(f"{100 * r['flag_' + k]:.0f}%" for k in ORDERS) + " |")
  mean = {k: np.mean([r["flag_" + k] for r in rows]) for k in ORDERS}
  lines += ["", "Mean share flagged: " + ", ".join(f"{k} {100 * v:.0f}%"
                                                   for k, v in mean.items()), "",
            "The paths on the shuffled stream (batch 64): accuracy % / chance",
            "", "| corruption | source | adapt_safe | adapt |", "| --- | ---: | ---: | ---: |"]
  for r in rows:
    lines.append(f"| {r['corruption']} | {100 * r['accuracy']:.1f} / {r['chance']:.3f} | " +
                 " | ".join(f"{100 * r['accuracy_' + m]:.1f} / {r['chance_' + m]:.3f}"
                            for m in ("adapt_safe", "adapt")) + " |")
  lines.append("")
  return lines


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--data_dir", required=True)
  ap.add_argument("--artifacts", required=True, help="comma-separated .tflite paths")
  ap.add_argument("--limit", type=int, default=2000, help="images per corruption")
  ap.add_argument("--batch_size", type=int, default=64,
                  help="Dirichlet slot (the evaluator's batch size)")
  ap.add_argument("--output", default=None)
  args = ap.parse_args()
  t0 = time.time()
  body = []
  for path in args.artifacts.split(","):
    body += table(path, measure(path, args.data_dir, args.limit, args.batch_size))
  head = run_head("detector_agreement.py", time.time() - t0) + [
          "## The label-correlation detector on the source's labels", "",
          f"{args.limit} test images per corruption, severity 5, seed 0; agreement: share "
          "of consecutive source predictions that agree; flagged: share of images after "
          "which forge_controller_correlated() holds (gate defaults), fed the source's "
          "outputs in that order.", ""]
  emit("\n".join(head + body), args.output)
  return 0


if __name__ == "__main__":
  sys.exit(main())
