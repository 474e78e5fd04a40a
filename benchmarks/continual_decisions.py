"""Where the gate's decisions fall on a continual stream, and what each domain gets.

Runs `forge_tflm eval --protocol=continual` (15 corruptions back to back, no reset, a
device's period) with source, FORGE and the gated FORGE, and prints each decision (the
image it fell on, that image's corruption, on/off, the score, whether the detector
flagged) and each corruption's accuracy. `--reset_at_probe` measures a variant the
controller does not have: FORGE's state reset to its targets when a periodic probe
starts, so every probe scores FORGE from its targets as a stream's first probe does
(docs/decisions/gate-reset-at-probe.md).

    python benchmarks/continual_decisions.py --artifacts=runs/r8_forge.tflite \\
        --data_dir=../shared/datasets/cifar10 --output=benchmarks/results/continual_decisions.md
    python benchmarks/continual_decisions.py --artifacts=runs/r8_forge.tflite \\
        --data_dir=../shared/datasets/cifar10 --gate_periods=2048,1024 --variants=0 \\
        --output=benchmarks/results/continual_decisions_periods.md
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks._report import emit, run_head  # noqa: E402


def traced_gate(reset_at_probe: bool):
  """GatedForge that logs (image, on, score, flagged) at each decision."""
  from forge_tflm.evaluation import gate

  class Traced(gate.GatedForge):
    def reset(self):
      super().reset()
      self.trace = []

    def predict(self, x_int8):
      c = self.controller
      if reset_at_probe and c.probing and c.probed_images == 0 and self.images > 0:
        self.model.reset()
      return super().predict(x_int8)

    def _decided(self, event):
      super()._decided(event)
      self.trace.append((self.images, event == gate._c.EVENT_ON, float(self.controller.score),
                         bool(self.controller.correlated)))

  return Traced


def run(path, data_dir, limit, batch, reset_at_probe, period):
  """(decisions with their corruption, accuracy per corruption and method)."""
  from forge_tflm.cli.main import main as cli
  from forge_tflm.evaluation import gate, protocol

  traced = traced_gate(reset_at_probe)
  seen = {}
  original = protocol.run_stream

  def run_stream(predict, inputs, labels, order, batch_size, on_batch=None, hits=None):
    acc = original(predict, inputs, labels, order, batch_size, on_batch, hits)
    method = getattr(predict, "__self__", None)
    if isinstance(method, traced):
      seen["trace"], seen["order"] = list(method.trace), order
    return acc

  protocol.run_stream = run_stream
  gate_class = protocol._METHOD_CLASSES["forge-gated"]
  protocol._METHOD_CLASSES["forge-gated"] = traced
  try:
    with tempfile.TemporaryDirectory() as tmp:
      code = cli(["forge_tflm", "eval", f"--artifact={path}", f"--data_dir={data_dir}",
                  "--methods=source,forge,forge-gated", f"--limit={limit}", "--orderings=1",
                  f"--batch_size={batch}", f"--gate_period={period}",
                  "--protocol=continual", f"--output_dir={tmp}"])
      if code:
        raise SystemExit(f"forge_tflm eval exited {code}")
      with open(os.path.join(tmp, "results.json")) as f:
        doc = json.load(f)
  finally:
    protocol.run_stream = original
    protocol._METHOD_CLASSES["forge-gated"] = gate_class
  (stream,) = doc["domains"].values()
  return seen, stream


def section(path, batch, period, reset, seen, stream, domain_of) -> list[str]:
  head = [f"## {os.path.basename(path)}, batch {batch}, period {period:,}"
          + (", FORGE reset at each periodic probe" if reset else ", the controller as built"),
          "", "| image | corruption | decision | score | detector flags |",
          "| ---: | --- | --- | ---: | --- |"]
  order = seen["order"]
  rows = [f"| {img:,} | {domain_of(order[min(img, len(order) - 1)])} | {'on' if on else 'off'}"
          f" | {score:+.3f} | {'yes' if flag else 'no'} |" for img, on, score, flag in seen["trace"]]
  acc = ["", "| corruption | source | FORGE | gated | gated - source |",
         "| --- | ---: | ---: | ---: | ---: |"]
  for d in stream["source"]:
    s, f, g = (100 * float(np.mean(stream[m][d])) for m in ("source", "forge", "forge-gated"))
    acc.append(f"| {d} | {s:.1f} | {f:.1f} | {g:.1f} | {g - s:+.1f} |")
  return head + rows + acc + [""]


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--artifacts", required=True, help="comma-separated .tflite paths")
  ap.add_argument("--data_dir", required=True)
  ap.add_argument("--limit", type=int, default=2000, help="images per corruption")
  ap.add_argument("--batch_size", type=int, default=64)
  ap.add_argument("--gate_periods", default="10240",
                  help="gate periods (images), comma-separated; default: a device's")
  ap.add_argument("--variants", default="0,1",
                  help="0: the controller as built; 1: --reset_at_probe; comma-separated")
  ap.add_argument("--output", default=None)
  args = ap.parse_args()
  from forge_tflm.corruptions import CORRUPTIONS

  t0 = time.time()
  body = []
  limit = args.limit
  for path in args.artifacts.split(","):
    for period in (int(p) for p in args.gate_periods.split(",")):
      for reset in (v == "1" for v in args.variants.split(",")):
        seen, stream = run(path, args.data_dir, limit, args.batch_size, reset, period)
        body += section(path, args.batch_size, period, reset, seen, stream,
                        lambda i: CORRUPTIONS[i // limit])
  head = run_head("continual_decisions.py", time.time() - t0) + [
          f"Continual streams: the 15 corruptions of {args.limit} test images each (severity"
          " 5), back to back in the order `forge_tflm eval --protocol=continual` draws"
          " (ordering 0), no reset; the gate's period in each heading (10,240: a device's);"
          " each decision at the image count when it fell.", ""]
  emit("\n".join(head + body), args.output)
  return 0


if __name__ == "__main__":
  sys.exit(main())
