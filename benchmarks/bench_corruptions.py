"""Times each corruption on CIFAR-10 test images and checks its fidelity.

For every corruption at one severity (default 5) it reports the wall and CPU
seconds to corrupt N images and, at severity 5, the mean absolute pixel
difference (MAD, 0..255) to the clean images next to the MAD of the original
generator (make_cifar_c.py) on the same data.

  python benchmarks/bench_corruptions.py [--n 10000] [--severity 5]
      [--data /work/shared/datasets/cifar10] [--params cifar|tinyimagenet]

Without the CIFAR-10 copy it falls back to random images (timing only).
With --params tinyimagenet, images are upscaled 2x to 64x64 (timing only).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from forge_tflm.corruptions import CORRUPTIONS, corrupt
from forge_tflm.corruptions.params import CIFAR10_TEST_SEVERITY5_MAD

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DATA = os.path.join(os.path.dirname(REPO_ROOT), "shared", "datasets", "cifar10")


def load_images(data: str, n: int) -> tuple[np.ndarray, bool]:
  """First n CIFAR-10 test images, or random ones if the data is absent."""
  if os.path.exists(data):
    from forge_tflm.data import load_dataset  # pylint: disable=import-outside-toplevel
    return load_dataset("cifar10", "test", data).images[:n], True
  print(f"(no CIFAR-10 at {data}: timing random images, no fidelity numbers)")
  return np.random.default_rng(0).integers(0, 256, (n, 32, 32, 3), dtype=np.uint8), False


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--n", type=int, default=10000)
  parser.add_argument("--severity", type=int, default=5)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--data", default=DEFAULT_DATA)
  parser.add_argument("--params", default="cifar", choices=("cifar", "tinyimagenet"))
  parser.add_argument("--only", nargs="*", default=None, help="corruption names")
  args = parser.parse_args(argv)
  images, real = load_images(args.data, args.n)
  if args.params == "tinyimagenet":
    images = images.repeat(2, axis=1).repeat(2, axis=2)
    real = False
  compare = real and args.severity == 5
  print(f"{len(images)} images {images.shape[1]}x{images.shape[2]},"
        f" params={args.params}, severity {args.severity}")
  # CPU seconds are the better measure on a shared machine.
  header = f"{'corruption':<18} {'wall s':>8} {'cpu s':>8}"
  if compare:
    header += f" {'MAD':>7} {'target':>7} {'dev %':>7}"
  print(header)
  total = total_cpu = 0.0
  for name in args.only or CORRUPTIONS:
    start, start_cpu = time.perf_counter(), time.process_time()
    out = corrupt(images, name, args.severity, seed=args.seed, params=args.params)
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - start_cpu
    total += seconds
    total_cpu += cpu_seconds
    line = f"{name:<18} {seconds:8.2f} {cpu_seconds:8.2f}"
    if compare:
      mad = float(np.abs(out.astype(np.int16) - images.astype(np.int16)).mean())
      target = CIFAR10_TEST_SEVERITY5_MAD[name]
      line += f" {mad:7.2f} {target:7.1f} {100 * (mad - target) / target:+7.1f}"
    print(line, flush=True)
  print(f"{'total':<18} {total:8.2f} {total_cpu:8.2f}")


if __name__ == "__main__":
  main()
