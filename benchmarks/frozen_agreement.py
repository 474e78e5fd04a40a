"""Does inserting FORGE_RECALIB change the deployed model when it is not adapting?

Runs the FORGE artifact with every node frozen at its clean targets and the plain
int8 conversion of the same model (`forge_tflm convert --plain_output`) over a
clean split, and prints top-1 agreement and both accuracies (plus the float Keras
model's with --keras_model). Un-fusing the activation adds one requantization per
site, so bit-identity is not expected.

    python benchmarks/frozen_agreement.py --artifact=runs/r20_forge.tflite \
        --plain=runs/r20_int8.tflite --data_dir=../shared/datasets/cifar10
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from forge_tflm.data import load_dataset
from forge_tflm.artifact import Artifact
from forge_tflm.runtime.segmented import SegmentedModel


def predict(model: SegmentedModel, x: np.ndarray, batch: int, mode: str) -> np.ndarray:
  return np.concatenate([model.run(x[i:i + batch], mode=mode).argmax(1)
                         for i in range(0, len(x), batch)])


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--artifact", required=True)
  p.add_argument("--plain", required=True)
  p.add_argument("--keras_model")
  p.add_argument("--dataset", default="cifar10")
  p.add_argument("--data_dir")
  p.add_argument("--split", default="test")
  p.add_argument("--kernels", default="reference", choices=["reference", "optimized"])
  p.add_argument("--batch_size", type=int, default=100)
  p.add_argument("--limit", type=int, default=0)
  args = p.parse_args()

  data = load_dataset(args.dataset, args.split, args.data_dir)
  data = data.random_subset(args.limit, seed=0)
  artifact = Artifact.load(args.artifact)
  contract = artifact.input_contract
  forge = SegmentedModel.from_artifact(artifact, args.kernels)
  plain = SegmentedModel(open(args.plain, "rb").read(), args.kernels)
  x = plain.quantize_input(contract.to_float(data.images))
  a = predict(plain, x, args.batch_size, "frozen")
  b = predict(forge, x, args.batch_size, "frozen")
  result = {
      "images": len(data), "kernels": args.kernels,
      "top1_agreement": float(np.mean(a == b)),
      "plain_int8_accuracy": float(np.mean(a == data.labels)),
      "forge_frozen_accuracy": float(np.mean(b == data.labels)),
  }
  result["accuracy_delta_points"] = 100 * (result["forge_frozen_accuracy"] -
                                           result["plain_int8_accuracy"])
  if args.keras_model:
    import keras
    model = keras.saving.load_model(args.keras_model, compile=False)
    logits = model.predict(contract.to_float(data.images), batch_size=256, verbose=0)
    result["float_accuracy"] = float(np.mean(logits.argmax(1) == data.labels))
  print(json.dumps(result, indent=2))


if __name__ == "__main__":
  main()
