"""Generates what a device run needs and what it must print, for one artifact:

  python -m forge_tflm.deploy --artifact=runs/r20_forge.tflite \
      --data_dir=../shared/datasets/cifar10 --corruption=gaussian_noise --severity=5 \
      --images=200 --out=/tmp/forge_app_gen

writes into --out (a build or tmp folder, never the repo):
  forge_app_data.h/.cc  the model (alignas(16)) and the int8 images as C arrays
                        (esp32s3_app/core's ForgeAppConfig.model / .images)
  images.bin            the same images as a raw file (esp32s3_app/host's binary)
  expected.json         the evaluator's outputs at batch 1, reference kernels, same
                        adaptation: per image the int8 logits, the prediction, the
                        label, checksums of every op's output and of each FORGE op's
                        output and state (forge_tflm.deploy.expected_outputs)
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(prog="python -m forge_tflm.deploy", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--artifact", required=True, help=".tflite (its manifest beside it)")
  p.add_argument("--data_dir", default=None, help="dataset path (as forge_tflm eval)")
  p.add_argument("--dataset", default="cifar10")
  p.add_argument("--corruption", default="gaussian_noise", help="a corruption or 'clean'")
  p.add_argument("--severity", type=int, default=5)
  p.add_argument("--images", type=int, default=200, help="stream length (eval's --limit)")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--mode", choices=("adapt", "frozen"), default="adapt")
  p.add_argument("--out", required=True)
  args = p.parse_args(argv)

  import numpy as np

  from forge_tflm import deploy

  stream = deploy.corrupted_stream(args.data_dir, args.corruption, args.severity,
                                   limit=args.images, seed=args.seed, dataset=args.dataset)
  x = deploy.model_input(args.artifact, stream.images)
  os.makedirs(args.out, exist_ok=True)
  deploy.write_c_arrays(args.out, args.artifact, x, stream.labels)
  deploy.write_image_stream(os.path.join(args.out, "images.bin"), x)
  exp = deploy.expected_outputs(args.artifact, x, mode=args.mode, trace="all")
  doc = {
      "artifact": os.path.abspath(args.artifact), "stream": stream.name,
      "images": len(x), "seed": args.seed, "mode": args.mode, "kernels": "reference",
      "ops": exp.op_names, "forge_ops": exp.forge_ops,
      "accuracy": float(np.mean(exp.predictions == stream.labels)) if len(x) else None,
      "per_image": [{
          "index": n, "label": int(stream.labels[n]), "pred": int(exp.predictions[n]),
          "logits": exp.logits[n].astype(int).tolist(),
          "forge": [f"{v:08x}" for v in exp.forge_checksums[n]],
          "state": [f"{v:08x}" for v in exp.state_checksums[n]],
          "trace": [f"{v:08x}" for v in exp.op_checksums[n]],
      } for n in range(len(x))],
  }
  path = os.path.join(args.out, "expected.json")
  with open(path + ".partial", "w") as f:
    json.dump(doc, f)
  os.replace(path + ".partial", path)
  print(f"wrote {args.out}: {len(x)} images ({stream.name}), expected accuracy "
        f"{doc['accuracy']}", file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main())
