"""Trains the PyTorch CIFAR ResNet-20 (option-A shortcuts) briefly and exports it to ONNX.

A PyTorch model for checks that need one trained (the gate on a model it was not tuned
on, benchmarks/gate_other_models.py); it is not a bundled model and nothing of it is
committed (it is derived from the dataset). The network is
forge_tflm/testing/torch_models.py's ResNet20A with the input normalization inside the
model, so it takes raw pixels: convert it with --input_range=0,255. Seeded; random crop
and flip; SGD with momentum, cosine learning rate.

    python benchmarks/train_torch_resnet20.py --data_dir=../shared/datasets/cifar10 \\
        --epochs=4 --out=runs/torch_r20
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)


def _augment(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
  """Random 4-pixel-padded crop and horizontal flip, NHWC uint8."""
  n = len(x)
  padded = np.pad(x, ((0, 0), (4, 4), (4, 4), (0, 0)), mode="reflect")
  dy, dx = rng.integers(0, 9, n), rng.integers(0, 9, n)
  out = np.stack([padded[i, dy[i]:dy[i] + 32, dx[i]:dx[i] + 32] for i in range(n)])
  flip = rng.random(n) < 0.5
  out[flip] = out[flip, :, ::-1]
  return out


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--data_dir", required=True)
  ap.add_argument("--epochs", type=int, default=4)
  ap.add_argument("--batch_size", type=int, default=128)
  ap.add_argument("--lr", type=float, default=0.1)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--threads", type=int, default=1)
  ap.add_argument("--out", required=True, help="folder for model.onnx and train.json")
  args = ap.parse_args(argv)
  import torch
  from torch.nn import functional as F

  from forge_tflm.data import load_dataset
  from forge_tflm.testing.torch_models import ResNet20A, export

  torch.manual_seed(args.seed)
  torch.set_num_threads(args.threads)
  rng = np.random.default_rng(args.seed)
  train = load_dataset("cifar10", "train", args.data_dir)
  test = load_dataset("cifar10", "test", args.data_dir)
  x, y = np.asarray(train.images), np.asarray(train.labels, np.int64)
  model = ResNet20A(normalize=True)
  opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4,
                        nesterov=True)
  steps = args.epochs * (len(x) // args.batch_size)
  sched = torch.optim.lr_scheduler.OneCycleLR(opt, args.lr, total_steps=steps,
                                              pct_start=0.15)
  t0, log = time.time(), []
  for epoch in range(args.epochs):
    model.train()
    order = rng.permutation(len(x))
    for s in range(len(x) // args.batch_size):
      idx = order[s * args.batch_size:(s + 1) * args.batch_size]
      xb = torch.from_numpy(_augment(x[idx], rng)).permute(0, 3, 1, 2).float()
      loss = F.cross_entropy(model(xb), torch.from_numpy(y[idx]))
      opt.zero_grad()
      loss.backward()
      opt.step()
      sched.step()
    model.eval()
    with torch.no_grad():
      xt = torch.from_numpy(np.asarray(test.images)).permute(0, 3, 1, 2).float()
      pred = torch.cat([model(xt[i:i + 500]).argmax(1) for i in range(0, len(xt), 500)])
    acc = float((pred.numpy() == np.asarray(test.labels)).mean())
    log.append({"epoch": epoch + 1, "test_accuracy": acc, "seconds": round(time.time() - t0)})
    print(json.dumps(log[-1]), flush=True)
  os.makedirs(args.out, exist_ok=True)
  export(model, os.path.join(args.out, "model.onnx"))
  with open(os.path.join(args.out, "train.json"), "w") as f:
    json.dump({"command": "python benchmarks/train_torch_resnet20.py "
               + " ".join(argv if argv is not None else sys.argv[1:]), "epochs": log}, f,
              indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
