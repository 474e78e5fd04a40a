"""Candidate in-op defences against label-correlated streams, simulated on the host.

Not the op: each candidate replaces FORGE_RECALIB's step at every site with a float64
simulation of "FORGE plus the candidate" (SegmentedModel.forge_kernel), to decide which
one is worth defining in the SPEC and the C core. Candidates:

  forge        FORGE itself (float64 simulation; the op's own numbers differ slightly)
  cut-last     the last site never adapts (where the class signal in the channel means
               is largest: between-class variance 22% of the total there, under 5%
               elsewhere, on 5,000 clean training images)
  prior        class-prior correction: the converter would store per site and class the
               clean class-conditional mean of the conv output minus the class average
               (K x C constants, flash); the app keeps w, an EMA (the op's window rate)
               of the model's softmax outputs, and each site normalizes with
               mu - sum_k w_k offset_k. The prediction of batch t steers batch t+1
               (deferred by one invocation); state unchanged, K floats per model in SRAM.
  prior-var    prior, and the variance corrected the same way: the state's variance
               holds the within-class spread of the classes w favours plus their
               spread around sum_k w_k offset_k; the op uses var + B - sum_k w_k
               (offset_k - sum_j w_j offset_j)^2 with B = mean_k offset_k^2 (the
               between-class variance of balanced labels). Same constants.
  balanced     class-balanced statistics (TRIBE's balanced BN, deferred): per site and
               class a first and second moment of the channel (2 x K x C state),
               initialised to the clean class means; the op normalizes with their
               class average; once the prediction exists each image's moments (2 x C
               pending per site) enter the classes by its softmax weights at rate
               K n_k / W. The prediction of an image updates the state for the next.

Streams: `forge_tflm eval`'s generated corruptions (severity 5), the same label orders
as `--label_order`, batch 64, one ordering.

    python benchmarks/label_defence_prototypes.py --artifact=runs/r20_forge.tflite \\
        --data_dir=../shared/datasets/cifar10 --output=benchmarks/results/label_defence_prototypes.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks._report import emit  # noqa: E402

CANDIDATES = ("forge", "cut-last", "prior", "prior-var", "balanced", "lagged",
              "balanced-deep", "lagged+balanced-deep", "balanced-hard", "balanced-hard-deep",
              "balanced-op", "balanced-op-deep")


class SimulatedSite:
  """FORGE at one site in float64 (window rate, running variance), plus a candidate."""

  def __init__(self, node, index: int, candidate: str, offsets, weights: dict,
               last: int, window: int):
    self.node, self.candidate, self.weights = node, candidate, weights
    orig = candidate
    self.offsets = offsets
    self.frozen = candidate == "cut-last" and index == last
    # lagged: normalize with the state before this batch's update (the batch's own
    # labels never steer its normalization); *-deep: balanced only in the last third.
    self.lagged = candidate.startswith("lagged")
    # *-hard: the argmax of the int8 logits instead of the softmax (exact on any target).
    self.hard = "-hard" in candidate
    if candidate.endswith("-deep"):
      candidate = "balanced" if index >= (2 * (last + 1)) // 3 else "forge"
    elif candidate.startswith("balanced"):
      candidate = "balanced"
    # *-op: the op's design: hard labels, per-class centred (mean, variance) updated
    # image by image with FORGE's running rule at rate min(1, K / W); the mixture's
    # variance is the mean within-class variance plus the spread of the class means.
    self.op_design = "-op" in orig
    self.candidate = candidate
    self.beta = node.state.beta.astype(np.float64)
    self.gamma = node.state.gamma_abs.astype(np.float64)
    self.mu, self.var = self.beta.copy(), self.gamma ** 2
    self.window = window
    self.between = (offsets ** 2).mean(0) if offsets is not None else None
    if candidate == "balanced":
      k = offsets.shape[0]
      self.m1 = self.beta + offsets
      within = np.maximum(self.gamma ** 2 - self.between, 1e-3 * self.gamma ** 2)
      self.m2 = within + self.m1 ** 2
      self.pending = None
      self.var_k = np.broadcast_to(within, self.m1.shape).copy()

  def commit(self, p: np.ndarray) -> None:
    """balanced: the batch's softmax p [B, K] assigns the pending per-image moments."""
    m1_img, m2_img = self.pending
    k = p.shape[1]
    if self.op_design:
      rate = min(1.0, k / self.window)
      var_img = np.maximum(m2_img - m1_img ** 2, 0)
      for i, label in enumerate(p.argmax(1)):
        mu_new = (1 - rate) * self.m1[label] + rate * m1_img[i]
        self.var_k[label] = ((1 - rate) * self.var_k[label]
                             + rate * (var_img[i] + (m1_img[i] - mu_new) ** 2))
        self.m1[label] = mu_new
      return
    if self.hard:
      p = np.eye(k)[p.argmax(1)]
    n = p.sum(0)
    for c in range(k):
      if n[c] <= 1e-9:
        continue
      m = min(1.0, k * n[c] / self.window)
      self.m1[c] = (1 - m) * self.m1[c] + m * (p[:, c] @ m1_img) / n[c]
      self.m2[c] = (1 - m) * self.m2[c] + m * (p[:, c] @ m2_img) / n[c]

  def __call__(self, x: np.ndarray) -> np.ndarray:
    q, c = self.node.quant, x.shape[-1]
    xf = (x.reshape(-1, c).astype(np.float64) - q.z_x) * q.s_x
    mu, var = self.beta, self.gamma ** 2
    if self.candidate == "balanced":
      per_image = xf.reshape(x.shape[0], -1, c)
      self.pending = (per_image.mean(1), (per_image ** 2).mean(1))
      mu = self.m1.mean(0)
      if self.op_design:
        var = self.var_k.mean(0) + ((self.m1 - mu) ** 2).mean(0)
      else:
        var = np.maximum(self.m2.mean(0) - mu ** 2, 1e-6)
    elif not self.frozen:
      m = min(1.0, x.shape[0] / self.window)
      mean_b, var_b = xf.mean(0), xf.var(0)
      mu, var = self.mu, self.var
      self.mu = (1 - m) * self.mu + m * mean_b
      self.var = (1 - m) * self.var + m * (var_b + (mean_b - self.mu) ** 2)
      if not self.lagged:
        mu, var = self.mu, self.var
      if self.candidate in ("prior", "prior-var"):
        w = self.weights["w"]
        favoured = w @ self.offsets
        mu = mu - favoured
        if self.candidate == "prior-var":
          var = var + self.between - w @ (self.offsets - favoured) ** 2
    y = (xf - mu) / np.sqrt(var + self.node.options.eps) * self.gamma + self.beta
    lo, hi = -128, 127
    if self.node.options.activation in ("relu", "relu6"):
      lo = max(-128, q.z_y)
    if self.node.options.activation == "relu6":
      hi = min(127, q.z_y + round(6 / q.s_y))
    return np.clip(np.round(y / q.s_y + q.z_y), lo, hi).astype(np.int8).reshape(x.shape)


def class_offsets(model, x: np.ndarray, labels: np.ndarray, classes: int) -> list:
  """Per site [classes, C]: clean class-conditional channel means minus their average."""
  sums = {}

  def capture(node, xb, mode):
    q, c = node.quant, xb.shape[-1]
    xf = (xb.reshape(xb.shape[0], -1, c).astype(np.float64) - q.z_x) * q.s_x
    sums.setdefault(id(node), []).append(xf.mean(1))
    return node.op(xb, mode="frozen")

  model.reset()
  model.forge_kernel = capture
  for s in range(0, len(x), 250):
    model.run(x[s:s + 250], mode="frozen")
  model.forge_kernel = None
  out = []
  for node in model.nodes:
    means = np.concatenate(sums[id(node)])
    per_class = np.stack([means[labels == k].mean(0) for k in range(classes)])
    out.append(per_class - per_class.mean(0))
  return out


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--artifact", required=True)
  ap.add_argument("--data_dir", required=True)
  ap.add_argument("--limit", type=int, default=2000)
  ap.add_argument("--calibration", type=int, default=5000, help="training images")
  ap.add_argument("--batch_size", type=int, default=64)
  ap.add_argument("--window", type=int, default=640)
  ap.add_argument("--orders", default="shuffled,dirichlet:0.1,dirichlet:0.01,sorted")
  ap.add_argument("--candidates", default=",".join(CANDIDATES))
  ap.add_argument("--output", default=None)
  args = ap.parse_args(argv)
  from forge_tflm.artifact import Artifact
  from forge_tflm.corruptions import CORRUPTIONS, corrupt_cached
  from forge_tflm.data import load_dataset
  from forge_tflm.deploy import model_input
  from forge_tflm.evaluation.field_streams import LabelOrder
  from forge_tflm.runtime.segmented import SegmentedModel

  t0 = time.time()
  artifact = Artifact.load(args.artifact, require_manifest=True)
  model = SegmentedModel.from_artifact(artifact)
  test = load_dataset("cifar10", "test", args.data_dir).random_subset(args.limit, 0)
  labels = np.asarray(test.labels)
  train = load_dataset("cifar10", "train", args.data_dir).random_subset(args.calibration, 1)
  offsets = class_offsets(model, model_input(artifact, train.images),
                          np.asarray(train.labels), 10)
  streams = {c: model_input(artifact, corrupt_cached(test.images, c, 5, seed=0))
             for c in CORRUPTIONS}

  def source(c):
    model.reset()
    y = np.concatenate([model.run(streams[c][s:s + 250], mode="frozen")
                        for s in range(0, len(labels), 250)])
    return 100 * float((y.argmax(1) == labels).mean())

  def run(candidate, order, c, ci):
    model.reset()
    weights = {"w": np.full(10, 0.1)}
    sites = {id(n): SimulatedSite(n, i, candidate, offsets[i], weights, len(model.nodes) - 1,
                                  args.window) for i, n in enumerate(model.nodes)}
    model.forge_kernel = lambda node, x, mode: sites[id(node)](x)
    idx = order.order(labels, np.random.default_rng([0, ci]))
    correct = 0
    for s in range(0, len(idx), args.batch_size):
      b = idx[s:s + args.batch_size]
      logits = model.dequantize_output(model.run(streams[c][b], mode="adapt"))
      correct += int((logits.argmax(1) == labels[b]).sum())
      p = np.exp(logits - logits.max(1, keepdims=True))
      p /= p.sum(1, keepdims=True)
      m = min(1.0, len(b) / args.window)
      weights["w"] = (1 - m) * weights["w"] + m * p.mean(0)
      for site in sites.values():
        if site.candidate == "balanced":
          site.commit(p)
    model.forge_kernel = None
    return 100 * correct / len(idx)

  src = {c: source(c) for c in CORRUPTIONS}
  lines = [f"# {datetime.date.today()}: python benchmarks/label_defence_prototypes.py "
           f"{' '.join(argv if argv is not None else sys.argv[1:])}",
           f"# host float64 simulations, not the op; {args.limit} test images per corruption,"
           f" severity 5, batch {args.batch_size}, window {args.window}, one ordering",
           "", "| candidate | stream order | mean | int8 source | corruptions hurt by > 1 "
           "point | worst vs source |", "| --- | --- | ---: | ---: | ---: | ---: |"]
  for spec in args.orders.split(","):
    kind, _, alpha = spec.partition(":")
    order = LabelOrder(kind, float(alpha) if alpha else None, args.batch_size)
    for cand in args.candidates.split(","):
      acc = {c: run(cand, order, c, ci) for ci, c in enumerate(CORRUPTIONS)}
      hurt = sum(acc[c] < src[c] - 1 for c in CORRUPTIONS)
      worst = min(acc[c] - src[c] for c in CORRUPTIONS)
      lines.append(f"| {cand} | {order.spec} | {np.mean(list(acc.values())):.1f} | "
                   f"{np.mean(list(src.values())):.1f} | {hurt}/15 | {worst:+.1f} |")
      print(lines[-1], file=sys.stderr, flush=True)
  lines += ["", f"# total {time.time() - t0:.0f} s"]
  emit("\n".join(lines) + "\n", args.output)
  return 0


if __name__ == "__main__":
  sys.exit(main())
