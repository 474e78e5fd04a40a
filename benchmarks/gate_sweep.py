"""The gate's probe_images and delta, measured on the deployed artifacts.

For each artifact, batch size and shuffled stream (the clean test subset and the 15
corruptions at severity 5, as `forge_tflm eval --limit=N --seed=0` draws them), the
int8 source and plain FORGE (adapting from its targets) run once and every image's
logits are kept. A gate with the detector off and one decision per stream sees exactly
these: its probe's adapting pass is plain FORGE from its targets and the source
predicts the probe; after the decision FORGE goes on (its state continues) or the
source runs. So the C controller (`forge_tflm.evaluation.gate.Controller`, the device's
code) is fed these outputs once per probe length and gives each stream's score, and the
gated accuracy of every (probe_images, delta) follows without running the stream again.
The detector (`label_window`) is off here: it changes which adapting path a probe
scores, not the score's threshold; `field_settings.md` measures the gate with it.

    python benchmarks/gate_sweep.py --data_dir=../shared/datasets/cifar10 \\
        --artifacts=runs/r20_forge.tflite,runs/mnv2_forge.tflite,runs/r8_forge.tflite \\
        --output=benchmarks/results/gate_sweep.md
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

HURT = 1.0  # points under the source: a hurt, as field_protocols.py counts one
LIFT = 3.0  # points over the source: a stream the gate must not turn off


def path_logits(model, x, mode, batch):
  """The int8 logits of one path over the stream, FORGE's state carried from call to
  call as in a gate's probe (reset before and after)."""
  model.reset()
  out = np.concatenate([model.run(x[i:i + batch], mode=mode)
                        for i in range(0, len(x), batch)])
  model.reset()
  return np.ascontiguousarray(out.reshape(len(out), -1))


def score(model, source, adapted, batch, probe):
  """The bound C controller's score of one probe over the stream's first images."""
  from forge_tflm.evaluation import gate

  scale, zero_point = model.output_quant
  c = gate.Controller(gate.settings(gate.GateConfig(probe_images=probe, label_window=0)),
                      source.shape[1], scale, zero_point)
  for i in range(0, len(source), batch):
    n = min(batch, len(source) - i)
    if c.probed(source[i:i + n], adapted[i:i + n], n):
      return float(c.score)
  raise ValueError(f"a {probe}-image probe needs more than {len(source)} images")


def measure(path, data_dir, limit, orderings, batch, probes):
  """Per stream and ordering: source and FORGE hits, and the score per probe length."""
  from forge_tflm import deploy
  from forge_tflm.artifact import Artifact
  from forge_tflm.corruptions import CORRUPTIONS
  from forge_tflm.runtime.segmented import ADAPT, SOURCE, SegmentedModel

  artifact = Artifact.load(path)
  model = SegmentedModel.from_artifact(artifact)
  rows = []
  for k in range(orderings):
    for name in ("clean",) + tuple(CORRUPTIONS):
      stream = deploy.corrupted_stream(data_dir, name, 5, limit=limit, seed=0,
                                       ordering_index=k)
      x = deploy.model_input(artifact, stream.images)
      s = path_logits(model, x, SOURCE, batch)
      f = path_logits(model, x, ADAPT, batch)
      rows.append({"stream": name, "ordering": k,
                   "source": s.argmax(-1) == stream.labels,
                   "forge": f.argmax(-1) == stream.labels,
                   "scores": {p: score(model, s, f, batch, p) for p in probes}})
      print(f"{os.path.basename(path)} b{batch} {name} o{k}: "
            + " ".join(f"{p}:{v:+.3f}" for p, v in rows[-1]["scores"].items()),
            file=sys.stderr, flush=True)
  return rows


def gated(row, probe, delta, batch) -> float:
  """Accuracy (%) of the gate on the stream: the source predicts the probe (to the end
  of its last call), then FORGE if the score exceeds delta, else the source."""
  first = -(-probe // batch) * batch
  rest = row["forge"] if row["scores"][probe] > delta else row["source"]
  return 100 * (row["source"][:first].sum() + rest[first:].sum()) / len(rest)


def gain(row) -> float:
  return 100 * (row["forge"].mean() - row["source"].mean())


def separation(rows, probes) -> list[str]:
  """Per probe length: the highest score of a stream FORGE does not lift (clean, or
  hurt by more than HURT points) and the lowest of one it lifts by LIFT or more."""
  lines = []
  for p in probes:
    low = [r["scores"][p] for r in rows if r["stream"] == "clean" or gain(r) < -HURT]
    high = [r["scores"][p] for r in rows if r["stream"] != "clean" and gain(r) >= LIFT]
    gap = min(high) - max(low) if low and high else float("nan")
    lines.append(f"| {p} | {max(low):+.3f} ({len(low)}) | {min(high):+.3f} ({len(high)})"
                 f" | {gap:+.3f} |")
  return lines


def grid(rows, probes, deltas, batch) -> list[str]:
  """Per (probe_images, delta): hurts, the worst corruption and clean against the
  source, and the share of FORGE's recovery kept over the corruptions."""
  corrupt = [r for r in rows if r["stream"] != "clean"]
  clean = [r for r in rows if r["stream"] == "clean"]
  src = np.mean([100 * r["source"].mean() for r in corrupt])
  forge = np.mean([100 * r["forge"].mean() for r in corrupt])
  lines = []
  for p in probes:
    for d in deltas:
      diff = [gated(r, p, d, batch) - 100 * r["source"].mean() for r in corrupt]
      on = sum(r["scores"][p] > d for r in corrupt)
      clean_diff = np.mean([gated(r, p, d, batch) - 100 * r["source"].mean()
                            for r in clean]) if clean else float("nan")
      kept = 100 * np.mean(diff) / (forge - src) if forge > src else float("nan")
      lines.append(f"| {p} | {d:.3f} | {sum(v < -HURT for v in diff)} | {min(diff):+.1f} |"
                   f" {clean_diff:+.1f} | {on}/{len(corrupt)} | {kept:.1f}% |")
  return lines


def section(path, batch, rows, probes, deltas, limit, orderings) -> list[str]:
  corrupt = [r for r in rows if r["stream"] != "clean"]
  head = [f"## {os.path.basename(path)}, batch {batch}", "",
          f"{limit} images per stream, {orderings} ordering(s); int8 source"
          f" {np.mean([100 * r['source'].mean() for r in corrupt]):.1f}, FORGE"
          f" {np.mean([100 * r['forge'].mean() for r in corrupt]):.1f} (mean over the"
          " corruptions); FORGE minus source per stream, and the score (nats) per probe"
          " length:", "",
          "| stream | ordering | FORGE - source | " + " | ".join(f"score @{p}" for p in probes)
          + " |", "| --- | ---: | ---: | " + " | ".join("---:" for _ in probes) + " |"]
  body = [f"| {r['stream']} | {r['ordering']} | {gain(r):+.1f} | "
          + " | ".join(f"{r['scores'][p]:+.3f}" for p in probes) + " |" for r in rows]
  sep = ["", f"Separation: the highest score of a stream FORGE does not lift (clean, or"
         f" more than {HURT:g} point under the source; how many) against the lowest of a"
         f" stream it lifts by {LIFT:g}+ points; a delta between them decides every such"
         " stream right.", "",
         "| probe_images | highest not lifted | lowest lifted | gap |",
         "| ---: | ---: | ---: | ---: |"] + separation(rows, probes)
  table = ["", "Gated (detector off, one decision per stream): corruptions hurt by more"
           f" than {HURT:g} point, the worst and clean against the source (points),"
           " corruptions turned on, and the share of FORGE's recovery kept.", "",
           "| probe_images | delta | hurts | worst | clean | on | kept |",
           "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
  return head + body + sep + table + grid(rows, probes, deltas, batch) + [""]


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--data_dir", required=True)
  ap.add_argument("--artifacts", required=True, help="comma-separated .tflite paths")
  ap.add_argument("--limit", type=int, default=2000, help="images per stream")
  ap.add_argument("--orderings", type=int, default=1)
  ap.add_argument("--batch_sizes", default="64,1")
  ap.add_argument("--probes", default="64,128,192,256,320,512",
                  help="probe_images values, comma-separated")
  ap.add_argument("--deltas", default="0.01,0.02,0.03,0.05,0.08",
                  help="delta values (nats), comma-separated")
  ap.add_argument("--output", default=None)
  args = ap.parse_args()
  probes = [int(v) for v in args.probes.split(",")]
  deltas = [float(v) for v in args.deltas.split(",")]
  t0 = time.time()
  body = []
  for path in args.artifacts.split(","):
    for batch in (int(b) for b in args.batch_sizes.split(",")):
      rows = measure(path, args.data_dir, args.limit, args.orderings, batch, probes)
      body += section(path, batch, rows, probes, deltas, args.limit, args.orderings)
  head = run_head("gate_sweep.py", time.time() - t0) + [
          "# The gate's probe_images and delta on the deployed artifacts", "",
          "Shuffled streams, severity 5, seed 0; the score is the bound C controller's"
          " (diversity gain of FORGE over the source across the probe, nats); the gated"
          " figures follow from the same per-image outputs (see the script's docstring).",
          ""]
  emit("\n".join(head + body), args.output)
  return 0


if __name__ == "__main__":
  sys.exit(main())
