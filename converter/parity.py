"""The parity gate: is the converted model the source model?

A front end can convert without an error and still be wrong (onnx2tf padding the W
axis of an [N, 16, 16, 16] tensor instead of its channels cost 33 points of accuracy
once, silently). So every conversion is checked on the first `images` calibration
images, in two steps:

  float: the float TFLite model (the same TensorFlow graph the int8 model is made
    from, converted without quantization: BN folded) against the source model
    (Keras, or onnxruntime for ONNX): every site's BN output (after its activation
    where TFLite fuses it into the conv) and the model output. Error of a tensor =
    max |tflite - source| / max |source|. Any tensor above the tolerance refuses the
    conversion, naming the first site (in graph order) that diverges;
  int8: the top-1 agreement of the int8 model with the float TFLite model (recorded;
    quantization is allowed to move some predictions).

Both go in the manifest (`parity`).
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np

from forge_tflm import tflite_graph as tg
from forge_tflm.converter import insert, match
from forge_tflm.converter.sites import BNSite, ConversionError

MODES = ("error", "warn")
DEFAULT_TOLERANCE = 1e-3
DEFAULT_IMAGES = 32


@dataclasses.dataclass(frozen=True)
class ParityReport:
  images: int
  tolerance: float
  output_error: float                 # float TFLite vs source, model output
  float_top1_agreement: float         # float TFLite vs source
  site_errors: tuple[tuple[str, float], ...]  # graph order
  int8_top1_agreement: float          # int8 TFLite vs float TFLite

  @property
  def worst_site(self) -> tuple[str, float] | None:
    return max(self.site_errors, key=lambda kv: kv[1]) if self.site_errors else None

  def divergence(self) -> str | None:
    """None when every compared tensor is within tolerance, else where it starts."""
    for name, err in self.site_errors:
      if not err <= self.tolerance:
        return (f"first at site {name!r} (BN output error {err:.3g} of its range; "
                f"tolerance {self.tolerance:g})")
    if not self.output_error <= self.tolerance:
      last = f" after the last site {self.site_errors[-1][0]!r}" if self.site_errors else ""
      return (f"at the model output{last} (error {self.output_error:.3g} of its range; "
              f"tolerance {self.tolerance:g})")
    return None

  def to_json(self) -> dict:
    worst = self.worst_site
    return {"images": self.images, "tolerance": self.tolerance,
            "float_vs_source": {"output_max_error": self.output_error,
                                "top1_agreement": self.float_top1_agreement,
                                "worst_site": worst[0] if worst else None,
                                "worst_site_error": worst[1] if worst else None},
            "int8_vs_float": {"top1_agreement": self.int8_top1_agreement}}


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
  got = np.asarray(got, np.float64)
  want = np.asarray(want, np.float64)
  if got.shape != want.shape:
    return float("inf")
  scale = max(float(np.abs(want).max()), 1e-12) if want.size else 1.0
  err = float(np.abs(got - want).max()) / scale if want.size else 0.0
  return err if np.isfinite(err) else float("inf")


def _activate(x: np.ndarray, activation: str) -> np.ndarray:
  if activation == "relu":
    return np.maximum(x, 0)
  if activation == "relu6":
    return np.clip(x, 0, 6)
  return x


def run_tflite(model_bytes: bytes, inputs: np.ndarray, tensors: list[int] = (),
               quantized: bool = False):
  """Runs a TFLite model image by image; returns (outputs [N, ...] float, {tensor: [N, ...]})
  with int8 inputs/outputs (de)quantized with the model's own parameters, unless the
  inputs are `quantized` already."""
  from ai_edge_litert.interpreter import Interpreter

  with warnings.catch_warnings():  # "preserve_all_tensors is for debugging": it is here.
    warnings.simplefilter("ignore", UserWarning)
    interp = Interpreter(model_content=model_bytes,
                         experimental_preserve_all_tensors=bool(tensors))
  interp.allocate_tensors()
  inp, out = interp.get_input_details()[0], interp.get_output_details()[0]
  outs, kept = [], {t: [] for t in tensors}
  for x in inputs:
    x = x[None]
    if inp["dtype"] == np.int8 and not quantized:
      s, z = inp["quantization"]
      x = np.clip(np.round(x / s) + z, -128, 127).astype(np.int8)
    interp.set_tensor(inp["index"], x.astype(inp["dtype"]))
    interp.invoke()
    y = interp.get_tensor(out["index"])
    if out["dtype"] == np.int8:
      s, z = out["quantization"]
      y = (y.astype(np.float32) - z) * s
    outs.append(y[0])
    for t in tensors:
      kept[t].append(interp.get_tensor(t)[0].copy())
  return np.stack(outs), {t: np.stack(v) for t, v in kept.items()}


def check(*, float_tflite: bytes, int8_tflite: bytes, sites: list[BNSite],
          inputs: np.ndarray, source_outputs: np.ndarray,
          source_bn: dict[str, np.ndarray], tolerance: float) -> ParityReport:
  """Compares (see module). inputs: float NHWC; source_bn: site -> BN output, NHWC."""
  model_t = tg.load_model(float_tflite)
  try:
    op_index = match.match_sites(model_t, sites)
  except ConversionError:
    op_index = {}  # Unmatched sites show as infinite errors below.
  sg = model_t.subgraphs[0]
  out_tensor = {s.name: int(sg.operators[op_index[s.name]].outputs[0])
                for s in sites if s.name in op_index}
  float_out, kept = run_tflite(float_tflite, inputs, sorted(set(out_tensor.values())))
  site_errors = []
  for s in sites:
    if s.name not in out_tensor:
      site_errors.append((s.name, float("inf")))
      continue
    fused = insert.fused_activation(sg.operators[op_index[s.name]])
    want = _activate(source_bn[s.name], fused)
    site_errors.append((s.name, relative_error(kept[out_tensor[s.name]], want)))
  int8_out, _ = run_tflite(int8_tflite, inputs)
  flat = lambda a: a.reshape(len(a), -1)  # noqa: E731
  return ParityReport(
      images=len(inputs), tolerance=tolerance,
      output_error=relative_error(flat(float_out), flat(source_outputs)),
      float_top1_agreement=float(np.mean(flat(float_out).argmax(1)
                                         == flat(source_outputs).argmax(1))),
      site_errors=tuple(site_errors),
      int8_top1_agreement=float(np.mean(flat(int8_out).argmax(1) == flat(float_out).argmax(1))))


# From an int8 .tflite there is no float source to compare with: the artifact in source
# mode (FORGE frozen at its measured targets) must predict what the input model does.
# The op reads each conv's own output, so it does, bit for bit (whole test splits of
# three models: benchmarks/results/source_agreement.md); only a channel whose clean std
# is under a step can move. Anything well below 100% is a wrong layout, scale or eps.
DEFAULT_SOURCE_AGREEMENT = 0.99
# A site "diverges" when more of its output elements move by over one step than this.
_SITE_MOVED_FRACTION = 0.01


@dataclasses.dataclass(frozen=True)
class SourceModeReport:
  images: int
  min_agreement: float
  top1_agreement: float             # Artifact (source mode) vs the input model.
  max_output_difference: float      # Dequantized model outputs (logits or scores).
  site_moved: tuple[tuple[str, float], ...]  # Fraction of elements off by > 1 step.

  def divergence(self) -> str | None:
    if self.top1_agreement >= self.min_agreement:
      return None
    first = next((f"; first diverging site {n!r} ({100 * f:.1f}% of its outputs off by"
                  " more than one step)" for n, f in self.site_moved
                  if f > _SITE_MOVED_FRACTION), "")
    return (f"top-1 agreement {100 * self.top1_agreement:.1f}% on {self.images} images,"
            f" below {100 * self.min_agreement:g}%{first}")

  def to_json(self) -> dict:
    return {"source_mode_vs_input": {"images": self.images,
                                     "top1_agreement": self.top1_agreement,
                                     "max_output_difference": self.max_output_difference,
                                     "min_agreement": self.min_agreement}}


def check_source_mode(*, plain_tflite: bytes, tflite: bytes, x_int8: np.ndarray,
                      inserted: list, min_agreement: float,
                      trace_images: int = DEFAULT_IMAGES) -> SourceModeReport:
  """Runs both models on int8 inputs with the device's integer kernels; on a refusal,
  traces the first `trace_images` images site by site to name where it starts."""
  from forge_tflm.runtime.segmented import SOURCE, SegmentedModel

  plain = SegmentedModel(plain_tflite)
  forge = SegmentedModel(tflite, site_names={s.op_index: s.site.name for s in inserted})
  seen: dict[str, np.ndarray] = {}  # Each site's output on the first batch.

  def keep(node, x, mode):
    y = node.op(x, mode=mode)
    seen.setdefault(node.name, y)
    return y

  forge.forge_kernel = keep
  # Source mode is stateless: batches give each image's outputs bit for bit, at a
  # fraction of the per-image interpreter calls.
  batch = max(1, trace_images)
  want, got = [], []
  for start in range(0, len(x_int8), batch):
    x = x_int8[start:start + batch]
    want.append(plain.dequantize_output(plain.run(x, mode=SOURCE)).reshape(len(x), -1))
    got.append(forge.dequantize_output(forge.run(x, mode=SOURCE)).reshape(len(x), -1))
  want, got = np.concatenate(want), np.concatenate(got)
  report = SourceModeReport(
      images=len(x_int8), min_agreement=min_agreement,
      top1_agreement=float(np.mean(got.argmax(1) == want.argmax(1))),
      max_output_difference=float(np.abs(got - want).max()), site_moved=())
  if report.divergence() is None:
    return report
  names = {s.output_tensor: s.site.name for s in inserted}
  return dataclasses.replace(report, site_moved=_site_moved(
      plain_tflite, x_int8[:trace_images], names, seen, len(x_int8[:trace_images])))


def _site_moved(plain_tflite: bytes, x_int8: np.ndarray, names: dict[str, str],
                seen: dict[str, np.ndarray], n: int) -> tuple[tuple[str, float], ...]:
  """Per site in graph order: the fraction of its output elements that source mode moves
  by more than one step from the input model's (the same tensor, kept by insertion)."""
  tensors = tg.load_model(plain_tflite).subgraphs[0].tensors
  index = {tg.tensor_name(t): i for i, t in enumerate(tensors)}
  _, kept = run_tflite(plain_tflite, x_int8, [index[name] for name in names], quantized=True)
  moved = []
  for tensor, site in names.items():
    a = kept[index[tensor]].astype(np.int32)
    b = seen[site][:n].astype(np.int32)
    moved.append((site, float(np.mean(np.abs(a - b) > 1))))
  return tuple(moved)
