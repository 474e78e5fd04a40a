"""Why recorded targets miss: per site, where a BN's recorded statistics part from the
deployed model's clean state.

A BN's recorded targets (beta, |gamma|) describe its output only if the conv output
it normalizes has the moving mean and variance on the data. This measures, per site
of a bundled Keras model, the pre-BN conv output's per-channel mean and variance in
four states, each against the next, in the BN output's units (a mean shift of
(mu - mu') / sqrt(moving_var + eps) moves the BN output by that many |gamma|; a std
ratio r scales it by r):

  recorded  the BN's moving mean and variance (what --targets=recorded normalizes to)
  train     training mode (every BN normalizes with its batch statistics) over
            augmented training batches of 128 (4-pixel zero padding, random crop, flip:
            forge_tflm/training/train.py), the mean of the batch moments: what the
            moving averages estimate; the rest is their lag and sampling (BN momentum)
  augmented eval mode (moving statistics everywhere before) over the same augmented
            images: the train/eval gap of the batch statistics in earlier layers
  clean     eval mode over the converter's 300 clean calibration images: augmentation

and, after the activation, the float model's clean outputs against the targets convert
measures on the plain int8 model over the same 300 images (quantization of earlier
layers), in units of the site's mean measured std.

    python benchmarks/target_gap.py --model=models/resnet20_cifar10.keras \\
        --plain=runs/r20_int8.tflite --data_dir=../shared/datasets/cifar10 \\
        --output=benchmarks/results/target_gap_r20.md
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
from forge_tflm.converter.calibration import _recording  # noqa: E402

BATCH = 128
CALIBRATION = 300  # the converter's default draw (ConvertOptions)


def _augment(images: np.ndarray, rng) -> np.ndarray:
  """train.py's augmentation in numpy: 4-pixel zero padding, random crop, random flip."""
  n, h, w, _ = images.shape
  padded = np.pad(images, ((0, 0), (4, 4), (4, 4), (0, 0)))
  out = np.empty_like(images)
  for i in range(n):
    y, x = rng.integers(0, 9, 2)
    crop = padded[i, y:y + h, x:x + w]
    out[i] = crop[:, ::-1] if rng.random() < 0.5 else crop
  return out


def _moments(model, layers, x: np.ndarray, training: bool):
  """{site: (mean, var)} per channel of each BN's input; in training mode the mean of
  the per-batch moments (what the moving averages estimate)."""
  sink: dict = {}
  with _recording(layers, sink, inputs=True):
    for i in range(0, len(x), BATCH):
      model(x[i:i + BATCH], training=training)
  out = {}
  for name, parts in sink.items():
    flat = [p.astype(np.float64).reshape(-1, p.shape[-1]) for p in parts]
    if training:
      out[name] = (np.mean([f.mean(0) for f in flat], 0),
                   np.mean([f.var(0) for f in flat], 0))
    else:
      allv = np.concatenate(flat)
      out[name] = (allv.mean(0), allv.var(0))
  return out


def _gap(a, b, mv_eps):
  """(mean |shift|, mean |std ratio - 1|) of state a against state b, in BN units."""
  shift = np.abs(a[0] - b[0]) / np.sqrt(mv_eps)
  ratio = np.abs(np.sqrt((a[1] + 1e-12) / (b[1] + 1e-12)) - 1.0)
  return float(np.mean(shift)), float(np.mean(ratio))


def _activate(x, activation: str):
  return {"none": x, "relu": np.maximum(x, 0), "relu6": np.clip(x, 0, 6)}[activation]


def _post_activation(model, layers, sites, x) -> dict:
  """{site: (mean, std)} per channel of act(BN(conv)) in eval mode over x."""
  sink: dict = {}
  with _recording(layers, sink, inputs=True):
    for i in range(0, len(x), BATCH):
      model(x[i:i + BATCH], training=False)
  out = {}
  for s in sites:
    layer = layers[s.name]
    mm, mv = np.asarray(layer.moving_mean), np.asarray(layer.moving_variance)
    g, b = np.asarray(layer.gamma), np.asarray(layer.beta)
    conv = np.concatenate([p.astype(np.float64).reshape(-1, p.shape[-1])
                           for p in sink[s.name]])
    y = _activate(g * (conv - mm) / np.sqrt(mv + layer.epsilon) + b, s.activation)
    out[s.name] = (y.mean(0), y.std(0))
  return out


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--model", required=True, help="the float Keras model")
  ap.add_argument("--plain", required=True, help="its plain int8 .tflite (convert"
                  " --plain_output)")
  ap.add_argument("--data_dir", required=True)
  ap.add_argument("--augmented", type=int, default=2560, help="augmented training images")
  ap.add_argument("--output", default=None)
  args = ap.parse_args(argv)
  t0 = time.time()

  from forge_tflm.quiet import import_quietly
  import_quietly("tensorflow", "keras")
  from forge_tflm import tflite_graph as tg
  from forge_tflm.artifact import InputContract
  from forge_tflm.converter import match
  from forge_tflm.converter.calibration import _layer_by_path
  from forge_tflm.converter.frontend_keras import find_keras_sites, load_keras_model
  from forge_tflm.converter.frontend_tflite import TfliteFrontend
  from forge_tflm.data import load_dataset

  model = load_keras_model(args.model)
  sites = find_keras_sites(model)
  layers = {s.name: _layer_by_path(model, s.name) for s in sites}
  recorded = {n: (np.asarray(l.moving_mean, np.float64), np.asarray(l.moving_variance, np.float64))
              for n, l in layers.items()}
  mv_eps = {n: recorded[n][1] + layers[n].epsilon for n in layers}
  train = load_dataset("cifar10", "train", args.data_dir).images
  contract = InputContract()
  keep = np.sort(np.random.default_rng(0).permutation(len(train))[:CALIBRATION])
  clean_x = contract.to_float(train[keep])
  rng = np.random.default_rng(1)
  pick = rng.permutation(len(train))[:args.augmented]
  aug_x = contract.to_float(_augment(train[pick], rng))

  clean = _moments(model, layers, clean_x, training=False)
  augmented = _moments(model, layers, aug_x, training=False)
  post = _post_activation(model, layers, sites, clean_x)
  int8 = TfliteFrontend(args.plain)
  index = match.match_sites(tg.load_model(int8.data), sites)
  measured = {s.name: (s.beta, s.gamma_abs)
              for s in int8.measure_targets(sites, clean_x, index)}
  # Last: training mode moves the BN layers' moving statistics (read above).
  trained = _moments(model, layers, aug_x, training=True)

  rows, sums = [], np.zeros(10)
  for s in sites:
    n = s.name
    parts = [_gap(clean[n], recorded[n], mv_eps[n]), _gap(trained[n], recorded[n], mv_eps[n]),
             _gap(augmented[n], trained[n], mv_eps[n]),
             _gap(clean[n], augmented[n], mv_eps[n])]
    unit = float(np.mean(measured[n][1])) or 1.0
    quant = (float(np.mean(np.abs(post[n][0] - measured[n][0]))) / unit,
             float(np.mean(np.abs(post[n][1] - measured[n][1]))) / unit)
    values = [v for p in parts for v in p] + list(quant)
    sums += values
    rows.append(f"| {n} | " + " | ".join(f"{v:.3f}" for v in values) + " |")
  mean = sums / len(sites)
  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                          capture_output=True, text=True).stdout.strip()
  head = ("| site | total: clean vs recorded, mean | std | lag: train vs recorded, mean | std"
          " | batch statistics: augmented vs train, mean | std | augmentation: clean vs"
          " augmented, mean | std | quantization: int8 vs float after the activation,"
          " mean | std |")
  lines = [f"# Why recorded targets miss: {os.path.basename(args.model)}", "",
           f"{datetime.date.today()}, commit {commit}, {time.time() - t0:.0f} s:",
           f"`python benchmarks/target_gap.py {' '.join(sys.argv[1:] if argv is None else argv)}`",
           "", "Per site, the mean over channels of |mean shift| and |std ratio - 1| of the"
           " pre-BN conv output between two states, in units of the BN output's |gamma|"
           " (benchmarks/target_gap.py's docstring); quantization: after the activation,"
           " in units of the site's mean measured std.", "",
           head, "|" + " --- |" * 11,
           "| **mean over sites** | " + " | ".join(f"**{v:.3f}**" for v in mean) + " |"]
  lines += rows
  emit("\n".join(lines) + "\n", args.output)
  return 0


if __name__ == "__main__":
  sys.exit(main())
