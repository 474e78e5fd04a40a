"""A very long batch-1 stream: does FORGE's state stay finite and accuracy in band?

Streams the CIFAR-10 test split (10,000 clean images, reshuffled every pass) through a
FORGE artifact at batch 1 with adaptation on, in the evaluator's runtime (LiteRT +
the C core, the evaluator's default `optimized` kernels unless --kernels=reference,
which is about 25x slower), for --images images.
Every --block images it records the block's top-1 accuracy and the state's extremes
(max |mu|, min and max var, any non-finite value). The band: after the first pass over
the split, every block's accuracy must stay within --band points of that first pass's
(adaptation must not drift over time); the int8 source's accuracy (FORGE frozen) on the
same split is reported beside it. Progress and the state are
checkpointed after every block (--out/long_stream.json and .npz), so a stopped run
continues where it was.

    python benchmarks/long_stream.py --artifact=runs/r20_forge.tflite \\
        --data_dir=../shared/datasets/cifar10 --images=1000000 --out=runs/long_stream \\
        --output=benchmarks/results/long_stream.txt
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks._report import emit  # noqa: E402


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--artifact", required=True)
  ap.add_argument("--data_dir", required=True)
  ap.add_argument("--images", type=int, default=1_000_000)
  ap.add_argument("--block", type=int, default=10_000)
  ap.add_argument("--band", type=float, default=2.0, help="points around the source")
  ap.add_argument("--kernels", default="optimized", choices=("reference", "optimized"))
  ap.add_argument("--out", required=True, help="folder for the log and the checkpoint")
  ap.add_argument("--output", default=None, help="also write the summary (and copy the "
                  "block log beside it as .json)")
  args = ap.parse_args(argv)

  from forge_tflm.artifact import Artifact
  from forge_tflm.data import load_dataset
  from forge_tflm.deploy import model_input
  from forge_tflm.fileio import write_atomically
  from forge_tflm.runtime.segmented import SegmentedModel

  artifact = Artifact.load(args.artifact, require_manifest=True)
  test = load_dataset("cifar10", "test", args.data_dir)
  x_all = model_input(artifact, test.images)
  labels = np.asarray(test.labels)
  model = SegmentedModel.from_artifact(artifact, kernels=args.kernels)
  os.makedirs(args.out, exist_ok=True)
  log_path = os.path.join(args.out, "long_stream.json")
  state_path = os.path.join(args.out, "long_stream_state.npz")

  if os.path.exists(log_path):
    with open(log_path) as f:
      log = json.load(f)
    if log["model_sha256"] != artifact.sha256 or log["block"] != args.block:
      raise SystemExit(f"{log_path} is from another artifact or block size")
    with np.load(state_path) as z:
      model.set_state([z[f"s{k}"] for k in range(len(z.files))])
  else:
    model.reset()
    t0 = time.time()
    preds = np.array([int(np.argmax(model.run(x_all[i:i + 1], mode="frozen")))
                      for i in range(len(x_all))])
    log = {"command": "python benchmarks/long_stream.py " + " ".join(argv or sys.argv[1:]),
           "date": str(datetime.date.today()), "model_sha256": artifact.sha256,
           "block": args.block, "kernels": args.kernels,
           "source_accuracy": float(np.mean(preds == labels)),
           "source_seconds": round(time.time() - t0, 1), "blocks": []}
    model.reset()
  done = sum(b["images"] for b in log["blocks"])
  while done < args.images:
    n = min(args.block, args.images - done)
    rng = np.random.default_rng(done // len(x_all))  # One shuffle per pass.
    order = rng.permutation(len(x_all))
    t0 = time.time()
    correct = 0
    for k in range(done, done + n):
      i = order[k % len(x_all)]
      y = model.run(x_all[i:i + 1], mode="adapt")
      correct += int(np.argmax(y) == labels[i])
    states = model.get_state()
    flat = np.concatenate([s.ravel() for s in states])
    c = [s.size // 2 for s in states]
    variances = np.concatenate([s[cc:] for s, cc in zip(states, c)])
    means = np.concatenate([s[:cc] for s, cc in zip(states, c)])
    first_pass = [b for b in log["blocks"] if b["first_image"] < len(x_all)]
    if done >= len(x_all) and "first_pass_accuracy" not in log:
      log["first_pass_accuracy"] = (sum(b["accuracy"] * b["images"] for b in first_pass)
                                    / sum(b["images"] for b in first_pass))
    center = log.get("first_pass_accuracy")
    block = {"first_image": done, "images": n, "accuracy": correct / n,
             "in_band": (None if center is None
                         else bool(abs(correct / n - center) <= args.band / 100)),
             "finite": bool(np.isfinite(flat).all()),
             "max_abs_mu": float(np.abs(means).max()), "min_var": float(variances.min()),
             "max_var": float(variances.max()), "seconds": round(time.time() - t0, 1)}
    log["blocks"].append(block)
    done += n
    write_atomically({
        log_path: json.dumps(log, indent=1).encode(),
        state_path: _npz_bytes({f"s{k}": s for k, s in enumerate(states)})})
    print(json.dumps(block), flush=True)
  blocks = log["blocks"]
  judged = [b for b in blocks if b["in_band"] is not None]
  accs = [b["accuracy"] for b in blocks]
  summary = (f"{done:,} images at batch 1 ({args.kernels} kernels): state finite in "
        f"{sum(b['finite'] for b in blocks)}/{len(blocks)} blocks (max |mu| "
        f"{max(b['max_abs_mu'] for b in blocks):.3g}, var in "
        f"[{min(b['min_var'] for b in blocks):.3g}, {max(b['max_var'] for b in blocks):.3g}]); "
        f"block accuracy {min(accs):.4f}-{max(accs):.4f}, "
        f"{sum(b['in_band'] for b in judged)}/{len(judged)} blocks after the first pass "
        f"within +-{args.band} points of its {log.get('first_pass_accuracy', float('nan')):.4f}; "
        f"int8 source (FORGE frozen) {log['source_accuracy']:.4f}; "
        f"{sum(b['seconds'] for b in blocks):.0f} s, "
        f"{sum(b['seconds'] for b in blocks) / done * 1e3:.2f} ms/image")
  if np.issubdtype(model.get_state()[0].dtype, np.integer):
    from forge_tflm.ops.reference import MU_MAX, VAR_MAX
    mu, var = max(b["max_abs_mu"] for b in blocks), max(b["max_var"] for b in blocks)
    summary += (f"\ninteger state (--arithmetic=int; mu in Q16 input steps, |mu| <= 2^30; var"
                f" in Q12 steps^2, at most 2^30 - 1): max |mu| {mu / MU_MAX:.2%} of its"
                f" limit, max var {var / VAR_MAX:.2%} of its limit")
  emit(f"# {log['date']}: {log['command']}\n{summary}\n", args.output)
  if args.output:
    with open(os.path.splitext(args.output)[0] + ".json", "w") as f:
      json.dump(log, f, indent=1)
  return 0


def _npz_bytes(arrays: dict) -> bytes:
  import io
  buf = io.BytesIO()
  np.savez(buf, **arrays)
  return buf.getvalue()


if __name__ == "__main__":
  sys.exit(main())
