"""`gap`: what folding takes away and what FORGE gives back.

Three int8 models of the bundled ResNet-20 on the 15 corruptions (severity 5, test
split, batch 64, one shuffled ordering), each against its own non-adapting self:

  kept BN      an int8 model that keeps BatchNorm as a separate layer after each conv,
               recalibrated forward-only (BN-adapt's statistics, the op's EMA rule);
  folded       the deployable int8 model, BN folded: nothing left to recalibrate, so
               its recovery is 0 by construction;
  FORGE        the folded model with FORGE_RECALIB (the artifact, the C core), with
               the BN statistics as targets (`convert --targets=recorded`), as the
               kept-BN model has them.

TFLite cannot keep BN apart from a preceding conv (the converter folds it), so the
kept-BN model is simulated from the artifact, faithfully where the int8 arithmetic is
concerned: per-channel weight quantization makes the unfolded conv's int8 weights the
folded ones (only the per-channel scales differ, by sigma/|gamma|), so rewriting each
site's conv weight scales, int32 bias and output quantization in the flatbuffer gives
exactly the int8 conv an unfolded model has; its output range is calibrated on 300
training images (as `convert` does). The output is sign(gamma) * (conv + bias) (the
sign folded into the weights, so that the per-tensor grid is that of the unfolded
conv up to mirroring), and BN runs on the host in float64 after it, its statistics
re-estimated by the op's rule (window, variance estimator) from the clean (mean,
variance), its output quantized to the op's output grid with its activation. The same
float64 step on the folded conv output ("FORGE, float64") separates the effect of the
conv output grid from that of the op's integer arithmetic.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from forge_tflm.experiments.common import (BUNDLED_MODELS, ExperimentContext, Outcome,
                                           bundled_artifact, grouped_bars)

PAPER = {"kept_bn": 20.1, "folded": 0.0, "forge": 20.9}
IMAGES = 2000
VARIANTS = ("folded", "forge", "forge_float64", "kept_bn_source", "kept_bn")


@dataclasses.dataclass(frozen=True)
class BNSite:
  mean: np.ndarray  # BN moving mean
  sigma: np.ndarray  # sqrt(moving variance + BN eps)
  sign: np.ndarray  # sign(gamma), +1 where gamma == 0
  eps: float


def bn_sites(keras_path: str, names) -> dict:
  from forge_tflm.quiet import import_quietly  # pylint: disable=import-outside-toplevel
  import_quietly("tensorflow", "keras")
  import keras  # pylint: disable=import-outside-toplevel

  model = keras.saving.load_model(keras_path, compile=False)
  out = {}
  for name in names:
    layer = model.get_layer(name)
    gamma, _, mean, var = (np.asarray(w, np.float64) for w in layer.get_weights())
    out[name] = BNSite(mean, np.sqrt(var + layer.epsilon),
                       np.where(gamma < 0, -1.0, 1.0), float(layer.epsilon))
  return out


def _dequant(x: np.ndarray, quant) -> np.ndarray:
  return (x.astype(np.float64) - quant.z_x) * quant.s_x


class KeptBN:
  """BN after the conv output `x` of one site, in float64, re-estimated by the op's
  rule from (mean0, var0), quantized to the op's output grid."""

  def __init__(self, node, mean0: np.ndarray, var0: np.ndarray, s_x: float, z_x: int):
    from forge_tflm.ops.reference import activation_range  # pylint: disable=import-outside-toplevel

    self.node, self.mean0, self.var0 = node, mean0, var0
    self.s_x, self.z_x = s_x, z_x
    self.beta = node.state.beta.astype(np.float64)
    self.gamma = node.state.gamma_abs.astype(np.float64)
    q = node.quant
    self.lo, self.hi = activation_range(node.options.activation, np.float32(q.s_y), q.z_y)
    self.reset()

  def reset(self):
    self.mu, self.var = self.mean0.copy(), self.var0.copy()

  def __call__(self, x: np.ndarray, mode: str) -> np.ndarray:
    c = x.shape[-1]
    xf = (x.reshape(-1, c).astype(np.float64) - self.z_x) * self.s_x
    mu, var = self.mean0, self.var0
    if mode == "adapt":
      o = self.node.options
      m = float(o.momentum_at(x.shape[0]))
      mean_b, var_b = xf.mean(0), xf.var(0)
      self.mu = (1 - m) * self.mu + m * mean_b
      used = var_b + (mean_b - self.mu) ** 2 if o.variance == "running" else var_b
      self.var = (1 - m) * self.var + m * used
      mu, var = self.mu, self.var
    elif mode == "frozen":
      mu, var = self.mu, self.var
    y = (xf - mu) / np.sqrt(var + self.node.options.eps) * self.gamma + self.beta
    q = self.node.quant
    yq = np.clip(np.round(y / q.s_y + q.z_y), self.lo, self.hi)
    return yq.astype(np.int8).reshape(x.shape)


def keep_bn(model_bytes: bytes, nodes, sites: dict, calibration_ranges: dict) -> bytes:
  """The artifact with each site's conv rewritten to the unfolded conv:
  sign(gamma) * (conv + bias), output quantized on `calibration_ranges[site]`."""
  from forge_tflm import tflite_graph as tg  # pylint: disable=import-outside-toplevel

  model = tg.load_model(model_bytes)
  sg = model.subgraphs[0]
  producer = {o: op for op in sg.operators for o in op.outputs}
  for node in nodes:
    s = sites[node.name]
    conv = producer[node.input]
    x_in, w_t, b_t = (sg.tensors[i] for i in conv.inputs[:3])
    s_in = tg.per_tensor_quant(x_in)[0]
    ratio = s.sigma / node.state.gamma_abs.astype(np.float64)
    if not np.all(np.isfinite(ratio)):
      raise ValueError(f"site {node.name}: gamma is 0 on some channel; the unfolded conv"
                       " is undefined there")
    s_w = np.asarray(w_t.quantization.scale, np.float64)
    bias = tg.buffer_array(model, b_t).astype(np.float64) * s_in * s_w
    beta = node.state.beta.astype(np.float64)
    new_s_w = s_w * ratio
    new_bias = (bias - beta) * ratio + s.sign * s.mean
    w_t.quantization.scale = [float(v) for v in new_s_w]
    b_t.quantization.scale = [float(v) for v in s_in * new_s_w]
    b_t.buffer = tg.add_const_buffer(
        model, np.round(new_bias / (s_in * new_s_w)).astype(np.int32))
    low, high = calibration_ranges[node.name]
    scale, zero = tg.int8_params(low, high)
    sg.tensors[node.input].quantization = tg.make_quant(scale, zero)
  return tg.save_model(model)


@dataclasses.dataclass(frozen=True)
class GapUnit:
  artifact: str
  keras_model: str
  variant: str
  stream: object  # selection.StreamSpec
  calibration_dir: str | None
  batch_size: int = 64


@dataclasses.dataclass
class GapModels:
  artifact: object
  folded: object  # SegmentedModel of the artifact
  kept: object  # SegmentedModel of the kept-BN rewrite
  kept_bytes: bytes
  kernels: dict  # "kept" / "folded" -> site -> KeptBN


@functools.lru_cache(maxsize=1)
def gap_models(artifact_path: str, keras_path: str, calibration_dir: str | None) -> GapModels:
  """The artifact's folded model and its kept-BN rewrite (conv output ranges from 300
  calibration images), with the float64 BN step of each site for both: built once per
  worker and shared by its units."""
  from forge_tflm.artifact import Artifact  # pylint: disable=import-outside-toplevel
  from forge_tflm.data import load_dataset  # pylint: disable=import-outside-toplevel
  from forge_tflm.runtime.inputs import model_input  # pylint: disable=import-outside-toplevel
  from forge_tflm.runtime.segmented import SegmentedModel  # pylint: disable=import-outside-toplevel

  artifact = Artifact.load(artifact_path, require_manifest=True)
  folded = SegmentedModel.from_artifact(artifact, "optimized")
  sites = bn_sites(keras_path, [n.name for n in folded.nodes])
  calib = load_dataset("cifar10", "train", calibration_dir).random_subset(300, 0)
  # The unfolded conv output's range: the folded one's calibration values mapped back.
  ranges = {}
  captured = {}

  def capture(node, x, mode):
    captured.setdefault(node.name, []).append(_dequant(x.reshape(-1, x.shape[-1]),
                                                       node.quant))
    return node.op(x, mode="source")

  folded.forge_kernel = capture
  x_cal = model_input(artifact, calib.images)
  for start in range(0, len(x_cal), 100):
    folded.run(x_cal[start:start + 100], mode="source")
  folded.forge_kernel = None
  for node in folded.nodes:
    s = sites[node.name]
    xf = np.concatenate(captured[node.name])
    beta = node.state.beta.astype(np.float64)
    ratio = s.sigma / node.state.gamma_abs.astype(np.float64)
    unfolded = (xf - beta) * ratio + s.sign * s.mean
    ranges[node.name] = (float(unfolded.min()), float(unfolded.max()))
  kept_bytes = keep_bn(artifact.model, folded.nodes, sites, ranges)
  kept = SegmentedModel(kept_bytes, "optimized", site_names=artifact.site_names,
                        source="kept-BN simulation")
  kernels = {"kept": {}, "folded": {}}
  for node in kept.nodes:
    s = sites[node.name]
    kernels["kept"][node.name] = KeptBN(node, s.sign * s.mean, s.sigma ** 2,
                                        node.quant.s_x, node.quant.z_x)
  for node in folded.nodes:
    g = node.state.gamma_abs.astype(np.float64)
    kernels["folded"][node.name] = KeptBN(node, node.state.beta.astype(np.float64), g * g,
                                          node.quant.s_x, node.quant.z_x)
  return GapModels(artifact, folded, kept, kept_bytes, kernels)


def unit_accuracy(unit: GapUnit) -> float:
  from forge_tflm.evaluation.selection import stream_accuracy, stream_inputs  # pylint: disable=import-outside-toplevel

  m = gap_models(unit.artifact, unit.keras_model, unit.calibration_dir)
  folded, kept, kernels = m.folded, m.kept, m.kernels
  x, labels = stream_inputs(unit.artifact, unit.stream)
  model, mode, table = {
      "folded": (folded, "source", None), "forge": (folded, "adapt", None),
      "forge_float64": (folded, "adapt", kernels["folded"]),
      "kept_bn_source": (kept, "source", kernels["kept"]),
      "kept_bn": (kept, "adapt", kernels["kept"])}[unit.variant]
  if table is not None:
    for k in table.values():
      k.reset()
    model.forge_kernel = lambda node, xb, m: table[node.name](xb, m)
  try:
    return stream_accuracy(model, x, labels, mode, unit.batch_size)
  finally:
    model.forge_kernel = None


def run(ctx: ExperimentContext) -> Outcome:
  from forge_tflm.corruptions import CORRUPTIONS  # pylint: disable=import-outside-toplevel
  from forge_tflm.evaluation.selection import StreamSpec, prepare  # pylint: disable=import-outside-toplevel
  from forge_tflm.sweep import run_units  # pylint: disable=import-outside-toplevel

  # The kept-BN model is rebuilt from the BN statistics: the recorded-target design.
  artifact = bundled_artifact(ctx, targets="recorded")
  keras_path = BUNDLED_MODELS["resnet20_cifar10"]
  streams = [StreamSpec(c, ctx.data_dir, split="test", images=ctx.images or IMAGES)
             for c in CORRUPTIONS]
  prepare(streams)
  units = [GapUnit(artifact, keras_path, v, s, ctx.data_dir) for v in VARIANTS
           for s in streams]
  acc = run_units(ctx.executor, unit_accuracy, units, "gap units", ctx.progress)
  per = {v: {s.corruption: 100 * acc[i * len(streams) + j] for j, s in enumerate(streams)}
         for i, v in enumerate(VARIANTS)}
  mean = {v: float(np.mean(list(per[v].values()))) for v in VARIANTS}
  rec = {"kept_bn": mean["kept_bn"] - mean["kept_bn_source"], "folded": 0.0,
         "forge": mean["forge"] - mean["folded"],
         "forge_float64": mean["forge_float64"] - mean["folded"]}
  data = {"accuracy": per, "mean_accuracy": mean, "recovery": rec,
          "images_per_stream": streams[0].images, "paper": PAPER,
          "comparisons": [
              {"claim": "kept-BN int8 model, forward-only BN recalibration: recovery"
                        " (points)", "paper": PAPER["kept_bn"], "here": rec["kept_bn"]},
              {"claim": "folded int8 model, nothing to recalibrate: recovery (points)",
               "paper": PAPER["folded"], "here": rec["folded"]},
              {"claim": "FORGE on the folded model: recovery (points)",
               "paper": PAPER["forge"], "here": rec["forge"]}]}
  lines = ["# gap: BN kept vs folded vs FORGE", "",
           f"ResNet-20 (bundled), 15 corruptions at severity 5, {streams[0].images} test"
           " images each, batch 64, one shuffled ordering. Each recovery is against the"
           " same model not adapting. The kept-BN model is a simulation (see"
           " forge_tflm/experiments/gap.py): the unfolded int8 conv exactly, BN on the"
           " host in float64.", "",
           "| model | int8 source | adapted | recovery (here) | paper |",
           "| --- | ---: | ---: | ---: | ---: |",
           f"| kept BN, BN recalibrated | {mean['kept_bn_source']:.2f} |"
           f" {mean['kept_bn']:.2f} | {rec['kept_bn']:+.2f} | +{PAPER['kept_bn']} |",
           f"| folded, nothing to recalibrate | {mean['folded']:.2f} | {mean['folded']:.2f}"
           f" | +0.00 (by construction) | +{PAPER['folded']} |",
           f"| folded + FORGE (the op) | {mean['folded']:.2f} | {mean['forge']:.2f} |"
           f" {rec['forge']:+.2f} | +{PAPER['forge']} |",
           f"| folded + FORGE (float64 step) | {mean['folded']:.2f} |"
           f" {mean['forge_float64']:.2f} | {rec['forge_float64']:+.2f} | |", "",
           "## Per corruption (accuracy, %)", "",
           "| corruption | " + " | ".join(VARIANTS) + " |",
           "| --- | " + " | ".join("---:" for _ in VARIANTS) + " |"]
  for c in CORRUPTIONS:
    lines.append(f"| {c} | " + " | ".join(f"{per[v][c]:.2f}" for v in VARIANTS) + " |")
  groups = {"kept BN, recalibrated": {"here": rec["kept_bn"], "paper": PAPER["kept_bn"]},
            "folded": {"here": 0.0, "paper": PAPER["folded"]},
            "folded + FORGE": {"here": rec["forge"], "paper": PAPER["forge"]}}
  return Outcome(data, "\n".join(lines), lambda p: grouped_bars(
      p, groups, "recovery (points)", "ResNet-20, 15 corruptions", size=(6, 3.4)),
      (artifact,))
