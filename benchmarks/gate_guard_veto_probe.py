"""The gate's label-correlation veto on class-balanced models: none (the gate before),
the shipped `concealed_veto`, or an alternative, on the same streams.

The guard is a class-balanced model's label defence, so its gate once had no veto. But
the guard's detector reads the adapted predictions, and on some model/corruption pairs
the label-blind statistics normalize each run of a class away within a batch or two:
the adapted predictions never agree enough to set the flag, and the gate's probe takes
their spread for "adapting undoes a collapse" (MobileNetV2-0.5, glass_blur sorted by
class, batch 64; README "Label defence"). The probe also sees the source's labels,
which adaptation cannot hide. Rules for a probe whose source predictions are
label-correlated (autocorrelation above the veto, DEFAULT_MAX_AUTOCORRELATION), --rule:
  concealed  "off" if the adapting path's predictions over the same probe are not
             label-correlated too (GateConfig.concealed_veto, what for_model ships:
             the gate's own statistics, K + 3 more doubles on a device)
  flagged    "off" while no class-balanced site is flagged (host simulation; a
             device would need the ops' flags)

Runs, with the evaluator's default kernels, the int8 source, the gate without a veto
(GateConfig(max_autocorrelation=None)) and the rule, all re-probing every
--gate_period images (GatedForge, so the columns reproduce `forge_tflm eval`), and
prints per label order the mean, the corruptions hurt (more than --tolerance under the
source) and rule minus no veto.

    python benchmarks/gate_guard_veto_probe.py --artifact=runs/mnv2_guard.tflite \\
        --data_dir=../shared/datasets/cifar10 --limit=2000 \\
        --output=benchmarks/results/gate_guard_veto_probe_mnv2.md
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import multiprocessing
import os
import sys
import time

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks._report import emit  # noqa: E402

from forge_tflm.corruptions.params import CORRUPTIONS  # noqa: E402
METHODS = ("source", "no veto", "rule")


def label_order(spec: str, batch_size: int = 64):
  """'shuffled', 'sorted' or 'dirichlet<alpha>' -> LabelOrder (slots of a batch, as
  forge_tflm eval's)."""
  from forge_tflm.evaluation.field_streams import LabelOrder
  if spec.startswith("dirichlet"):
    return LabelOrder("dirichlet", alpha=float(spec[len("dirichlet"):]), slot=batch_size)
  return LabelOrder(spec)


def guard_flagged(model) -> bool:
  return any(n.state.labels_correlated for n in model.nodes if n.op.class_balanced)


def flagged_gate():
  """GatedForge without a veto, plus "off" for a label-correlated probe while no
  class-balanced site is flagged."""
  from forge_tflm.evaluation import gate

  class FlaggedVetoGate(gate.GatedForge):
    def _decide(self, fired: bool) -> None:
      if (fired and self.model.class_balanced and not guard_flagged(self.model)
          and self.serial.autocorrelation() > gate.DEFAULT_MAX_AUTOCORRELATION):
        fired = False
      super()._decide(fired)

  return FlaggedVetoGate


def run_unit(artifact_path, data_dir, corruption, order_spec, k, batch_size, limit,
             period, rule):
  """Accuracy of the source, the gate without a veto and the rule on one stream."""
  from forge_tflm import quiet
  quiet.hide_framework_logs()
  from forge_tflm.artifact import Artifact
  from forge_tflm.corruptions import corrupt_cached
  from forge_tflm.data.datasets import load_dataset
  from forge_tflm.evaluation import gate
  from forge_tflm.evaluation.field_streams import reset_each_shift
  from forge_tflm.evaluation.int8_methods import Source
  from forge_tflm.evaluation.protocol import Stream, run_stream
  from forge_tflm.runtime.segmented import SegmentedModel

  artifact = Artifact.load(artifact_path)
  clean = load_dataset("cifar10", "test", data_dir).random_subset(limit or None, 0)
  images = corrupt_cached(clean.images, corruption, 5, seed=0)
  # The evaluator's own stream builder, so ordering k is forge_tflm eval's.
  (stream,) = reset_each_shift([Stream(corruption, images, clean.labels)],
                               label_order(order_spec, batch_size))
  order = stream.order(k, 0)
  # The evaluator's default kernels, so the default gate reproduces forge_tflm eval.
  model = SegmentedModel.from_artifact(artifact, kernels="optimized")
  x = model.quantize_input(artifact.input_contract.to_float(images))
  no_veto = gate.GateConfig(period=period, max_autocorrelation=None)
  ruled = (gate.GatedForge(model, gate.GateConfig(period=period), batch_size)
           if rule == "concealed" else flagged_gate()(model, no_veto, batch_size))
  out = {}
  for name, method in (("source", Source(model)),
                       ("no veto", gate.GatedForge(model, no_veto, batch_size)),
                       ("rule", ruled)):
    method.reset()
    out[name] = 100.0 * run_stream(method.predict, x, clean.labels, order, batch_size)
  return corruption, order_spec, k, out


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--artifact", required=True, help="a class-balanced (guarded) .tflite")
  ap.add_argument("--data_dir", required=True)
  ap.add_argument("--limit", type=int, default=2000, help="test images (0: all)")
  ap.add_argument("--batch_size", type=int, default=64)
  ap.add_argument("--orderings", type=int, default=3)
  ap.add_argument("--gate_period", type=int, default=1024)
  ap.add_argument("--label_orders", default="shuffled,dirichlet0.1,dirichlet0.01,sorted")
  ap.add_argument("--corruptions", default=",".join(CORRUPTIONS))
  ap.add_argument("--tolerance", type=float, default=0.5)
  ap.add_argument("--rule", choices=("concealed", "flagged"), default="concealed",
                  help="when the veto holds (see the module)")
  ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
  ap.add_argument("--output", default=None)
  args = ap.parse_args(argv)
  orders = args.label_orders.split(",")
  corruptions = args.corruptions.split(",")
  for spec in orders:
    label_order(spec)  # Refuse a bad order before any work.
  t0 = time.time()
  jobs = [(args.artifact, args.data_dir, c, o, k, args.batch_size, args.limit,
           args.gate_period, args.rule) for o in orders for c in corruptions
          for k in range(args.orderings)]
  acc: dict = {}
  with concurrent.futures.ProcessPoolExecutor(
      args.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
    futures = [pool.submit(run_unit, *j) for j in jobs]
    for n, f in enumerate(concurrent.futures.as_completed(futures), 1):
      c, o, k, out = f.result()
      acc.setdefault(o, {}).setdefault(c, []).append(out)
      print(f"[{n}/{len(jobs)}] {o} {c} #{k}: " + ", ".join(
          f"{m} {out[m]:.1f}" for m in METHODS), file=sys.stderr, flush=True)
  lines = [f"# {datetime.date.today()}: python benchmarks/gate_guard_veto_probe.py "
           f"{' '.join(argv if argv is not None else sys.argv[1:])}",
           f"# {args.limit or 'all'} test images per corruption, severity 5, batch "
           f"{args.batch_size}, {args.orderings} orderings, gate defaults with "
           f"--gate_period={args.gate_period}; hurt = more than {args.tolerance:g} point "
           f"under the int8 source; no veto: the gate with max_autocorrelation=None; "
           f"rule: {args.rule}", "",
           f"| label order | int8 source | no veto | hurts | worst | {args.rule} | "
           f"hurts | worst | {args.rule} - no veto |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
  detail = []
  for o in orders:
    mean = {c: {m: float(np.mean([r[m] for r in acc[o][c]])) for m in METHODS}
            for c in corruptions}
    cols = []
    for m in ("no veto", "rule"):
      diff = {c: mean[c][m] - mean[c]["source"] for c in corruptions}
      hurt = [c for c in corruptions if diff[c] < -args.tolerance]
      cols.append((np.mean([mean[c][m] for c in corruptions]), len(hurt),
                   min(diff.values())))
    src = np.mean([mean[c]["source"] for c in corruptions])
    lines.append(f"| {o} | {src:.2f} | {cols[0][0]:.2f} | {cols[0][1]}/{len(corruptions)} "
                 f"| {cols[0][2]:+.1f} | {cols[1][0]:.2f} | {cols[1][1]}/{len(corruptions)}"
                 f" | {cols[1][2]:+.1f} | {cols[1][0] - cols[0][0]:+.2f} |")
    detail += ["", f"{o}, per corruption (source / no veto / {args.rule}):", ""]
    detail += [f"- {c}: {mean[c]['source']:.1f} / {mean[c]['no veto']:.1f} / "
               f"{mean[c]['rule']:.1f}" for c in corruptions]
  lines += detail + ["", f"# total {time.time() - t0:.0f} s", ""]
  emit("\n".join(lines), args.output)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
