"""Does a FORGE artifact in source mode still predict what the int8 model it came from does?

For each PLAIN=ARTIFACT pair: both run over the clean test split in the evaluator's runtime (LiteRT + the C
core), the
artifact in source mode (FORGE frozen at its clean targets); prints the top-1 agreement,
the largest output difference and both accuracies. The only change source mode makes
is each site's widened pre-activation grid (the fused activation moved into FORGE).
Both models run with the same --kernels.

    python benchmarks/source_agreement.py --data_dir=../shared/datasets/cifar10 \\
        --pairs=runs/r20_plain.tflite=runs/r20_measured.tflite \\
        --output=benchmarks/results/source_agreement.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import time

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks._report import emit  # noqa: E402


def _outputs(model, x_int8: np.ndarray, batch: int) -> np.ndarray:
  from forge_tflm.runtime.segmented import SOURCE

  return np.concatenate([model.dequantize_output(model.run(x_int8[i:i + batch], mode=SOURCE))
                         .reshape(len(x_int8[i:i + batch]), -1)
                         for i in range(0, len(x_int8), batch)])


def _row(plain_path: str, artifact_path: str, ds, batch: int, kernels: str) -> str:
  from forge_tflm.artifact import Artifact
  from forge_tflm.runtime.segmented import SegmentedModel

  artifact = Artifact.load(artifact_path, require_manifest=True)
  x = artifact.input_contract.to_float(ds.images)
  plain = SegmentedModel(open(plain_path, "rb").read(), kernels)
  forge = SegmentedModel.from_artifact(artifact, kernels)
  want = _outputs(plain, plain.quantize_input(x), batch)
  got = _outputs(forge, forge.quantize_input(x), batch)
  agree = np.mean(want.argmax(1) == got.argmax(1))
  acc = lambda y: 100 * np.mean(y.argmax(1) == ds.labels)  # noqa: E731
  targets = artifact.manifest.targets
  how = targets["source"] + (f" ({targets['images']} images)" if "images" in targets else "")
  return (f"| {os.path.basename(artifact_path)} | {how} | {os.path.basename(plain_path)} |"
          f" {100 * agree:.2f} | {np.abs(want - got).max():.3g} | {acc(want):.2f} |"
          f" {acc(got):.2f} |")


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--pairs", required=True, help="comma-separated PLAIN=ARTIFACT")
  ap.add_argument("--data_dir", required=True)
  ap.add_argument("--batch_size", type=int, default=64)
  ap.add_argument("--kernels", default="optimized", choices=("reference", "optimized"),
                  help="the evaluator's: optimized is its default, reference the device's"
                  " integer arithmetic (about 25x slower)")
  ap.add_argument("--output", default=None)
  args = ap.parse_args(argv)

  from forge_tflm.data import load_dataset

  ds = load_dataset("cifar10", "test", args.data_dir)
  t0 = time.time()
  rows = [_row(*pair.split("="), ds, args.batch_size, args.kernels)
          for pair in args.pairs.split(",")]
  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                          capture_output=True, text=True).stdout.strip()
  lines = [f"# Source mode vs the int8 model it came from: CIFAR-10 test split ({len(ds)}"
           " images)", "", f"{datetime.date.today()}, commit {commit},"
           f" {time.time() - t0:.0f} s: `python benchmarks/source_agreement.py"
           f" {' '.join(sys.argv[1:])}`", "",
           "| artifact | targets | int8 model | top-1 agreement % | largest output difference"
           " | int8 model accuracy % | source mode accuracy % |",
           "| --- | --- | --- | ---: | ---: | ---: | ---: |"] + rows
  emit("\n".join(lines) + "\n", args.output)
  return 0


if __name__ == "__main__":
  sys.exit(main())
