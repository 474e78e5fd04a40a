"""`convert`: the converter as an ordered list of small passes over one context.

Every input becomes the plain full-int8 model first; FORGE goes into that model:

    load (frontend_keras / frontend_onnx / frontend_tflite) -> find sites ->
    select (select.py) -> calibration inputs (calibration.py) -> the plain int8 model
    (a float model: float and int8 conversion, quantize.py; clean top-1 above chance,
    clean_check.py; parity gate, parity.py; match convs, match.py) -> targets ->
    insert FORGE_RECALIB (insert.py) -> label-safe sites (label_safety.py) -> source
    mode is the plain model (parity.py) -> model checks (forge_tflm.model_check) ->
    outputs (outputs.py)

Targets (ConvertOptions.targets): "measured" (default) on the plain int8 model's conv
outputs over the calibration images (frontend_tflite.py), so the conv keeps its
output grid and source mode is the plain model bit for bit; "recorded", a float
model's BN statistics read at fold time (the paper's design), with each activated
site's conv moved to a pre-activation grid (calibration.py).

Each pass reads and fills a few fields of `_Context` and calls one module, which is
unit-tested on its own.
"""

from __future__ import annotations

import dataclasses
import os
import time

from absl import logging
import numpy as np

from forge_tflm import tflite_graph as tg
from forge_tflm.artifact import Manifest, manifest_path
from forge_tflm.fileio import file_sha256, write_atomically
from forge_tflm.quiet import native_output_hidden
from forge_tflm.converter import calibration as calib
from forge_tflm.converter import (clean_check, insert, label_safety, match, outputs,
                                  parity, static_shapes)
from forge_tflm.converter.frontend_keras import KerasFrontend
from forge_tflm.converter.frontend_onnx import OnnxFrontend
from forge_tflm.converter.frontend_tflite import TfliteFrontend
from forge_tflm.converter.options import ConvertOptions
from forge_tflm.converter.select import select_sites
from forge_tflm.converter.sites import BNSite, ConversionError
from forge_tflm.ops import RecalibOptions


@dataclasses.dataclass(frozen=True)
class ConversionResult:
  tflite: bytes
  plain_tflite: bytes  # The same int8 model without FORGE_RECALIB.
  manifest: Manifest
  written: tuple[str, ...]
  seconds: float


@dataclasses.dataclass
class _Context:
  source_path: str
  options: ConvertOptions
  calibration: object  # ImageSet, uint8 array or iterable of images.
  command: str
  calibration_source: str = ""
  frontend: object = None  # KerasFrontend or OnnxFrontend.
  sites_found: list[BNSite] = dataclasses.field(default_factory=list)
  sites: list[BNSite] = dataclasses.field(default_factory=list)
  calib_inputs: np.ndarray | None = None
  calib_labels: np.ndarray | None = None  # None: the calibration images carry none
  calib_classes: int = 0
  plain_tflite: bytes = b""
  float_tflite: bytes = b""
  parity: object = None  # parity.ParityReport (a float model's conversion)
  source_parity: object = None  # parity.SourceModeReport (measured targets)
  int8: object = None  # TfliteFrontend over the plain int8 model (measured targets)
  op_index: dict[str, int] = dataclasses.field(default_factory=dict)
  preact: dict[str, tuple[float, int, float]] = dataclasses.field(default_factory=dict)
  model_t: object = None
  inserted: list = dataclasses.field(default_factory=list)
  tflite: bytes = b""
  targets: dict = dataclasses.field(default_factory=lambda: {"source": "recorded"})


def _load(ctx: _Context) -> None:
  ext = os.path.splitext(ctx.source_path)[1].lower()
  if ext in (".keras", ".h5"):
    ctx.frontend = KerasFrontend(ctx.source_path)
  elif ext == ".onnx":
    ctx.frontend = OnnxFrontend(ctx.source_path)
  elif ext == ".tflite":
    ctx.frontend = TfliteFrontend(ctx.source_path)
  else:
    raise ConversionError(f"unsupported model file {ctx.source_path!r} (expected .keras,"
                          " .h5, .onnx or a full-int8 .tflite)")


def _find_sites(ctx: _Context) -> None:
  ctx.sites_found = ctx.frontend.find_sites()
  logging.info("found %d Conv->BN sites, %d channels", len(ctx.sites_found),
               sum(s.channels for s in ctx.sites_found))


def _select(ctx: _Context) -> None:
  ctx.sites = select_sites(ctx.sites_found, ctx.options.sites)


def _calibration_inputs(ctx: _Context) -> None:
  images, ctx.calibration_source = calib.calibration_images(ctx.calibration)
  if len(images) == 0:
    raise ConversionError("no calibration images")
  n = ctx.options.calibration_size
  labels, ctx.calib_classes = calib.calibration_labels(ctx.calibration)
  if n < len(images):  # The same draw as ImageSet.random_subset.
    rng = np.random.default_rng(ctx.options.calibration_seed)
    keep = np.sort(rng.permutation(len(images))[:n])
    images = images[keep]
    labels = None if labels is None else labels[keep]
  ctx.calib_labels = labels
  ctx.calib_inputs = ctx.options.input_contract.to_float(images)
  expected = tuple(ctx.frontend.input_shape)
  if tuple(ctx.calib_inputs.shape[1:]) != expected:
    raise ConversionError(f"calibration images are {ctx.calib_inputs.shape[1:]}, the model"
                          f" expects {expected}")


def _quantize(ctx: _Context) -> None:
  t0 = time.time()
  with native_output_hidden():  # TFLiteConverter's C++ prints straight to fd 1/2.
    converted = ctx.frontend.convert_tflite(ctx.calib_inputs)
  ctx.float_tflite, ctx.plain_tflite = (static_shapes.fold(m) for m in converted)
  logging.info("float and full-int8 conversion: %d bytes in %.1f s", len(ctx.plain_tflite),
               time.time() - t0)
  ctx.model_t = tg.load_model(ctx.plain_tflite)


def _clean_top1(ctx: _Context) -> None:
  with native_output_hidden():
    top1, why = clean_check.check(ctx.plain_tflite, ctx.calib_inputs, ctx.calib_labels,
                                  ctx.calib_classes, ctx.options.input_contract.describe())
  if top1 is not None:
    logging.info("int8 model top-1 on the %d clean calibration images: %.1f%%",
                 len(ctx.calib_labels), 100 * top1)
  if why is None:
    return
  if ctx.options.clean_check == "error":
    raise ConversionError(why + " (--clean_check=warn writes it anyway)")
  logging.warning("%s; written anyway (--clean_check=warn)", why)


def _parity(ctx: _Context) -> None:
  o = ctx.options
  inputs = ctx.calib_inputs[:o.parity_images]
  outputs, bn = ctx.frontend.reference(inputs, ctx.sites_found)
  with native_output_hidden():
    ctx.parity = parity.check(float_tflite=ctx.float_tflite, int8_tflite=ctx.plain_tflite,
                              sites=ctx.sites_found, inputs=inputs, source_outputs=outputs,
                              source_bn=bn, tolerance=o.parity_tolerance)
  p = ctx.parity
  worst = p.worst_site
  logging.info("parity on %d images: float vs %s output error %.2g (worst site %s %.2g), "
               "top-1 agreement %.1f%%; int8 vs float top-1 agreement %.1f%%", p.images,
               ctx.frontend.name, p.output_error, worst[0] if worst else "-",
               worst[1] if worst else 0.0, 100 * p.float_top1_agreement,
               100 * p.int8_top1_agreement)
  where = p.divergence()
  if where is None:
    return
  msg = (f"the converted float model differs from the {ctx.frontend.name} model, {where}: "
         "the artifact would be wrong")
  if o.parity_check == "error":
    raise ConversionError(msg + " (--parity_check=warn writes it anyway)")
  logging.warning("%s; written anyway (--parity_check=warn)", msg)


def _match(ctx: _Context) -> None:
  ctx.op_index = match.match_sites(ctx.model_t, ctx.sites)
  # The manifest lists sites in operator order; TFLite may order a shortcut's conv
  # before the block's body, unlike the source graph.
  ctx.sites = sorted(ctx.sites, key=lambda s: ctx.op_index[s.name])


def _preact_ranges(ctx: _Context) -> None:
  subgraph = ctx.model_t.subgraphs[0]
  need = [s for s in ctx.sites
          if insert.fused_activation(subgraph.operators[ctx.op_index[s.name]])
          != "none"]
  if not need:
    return
  stats = ctx.frontend.bn_output_ranges(need, ctx.calib_inputs)
  for s in need:
    ctx.preact[s.name] = calib.preact_params(stats[s.name], ctx.options.preact_range)


def _insert(ctx: _Context) -> None:
  if not ctx.sites:
    ctx.tflite = ctx.plain_tflite  # Nothing to insert: the plain model, byte for byte.
    return
  o = ctx.options

  def make_options(site: BNSite, activation: str) -> RecalibOptions:
    return o.recalib.replace(eps=site.eps if o.eps_from_bn else None,
                             activation=activation)

  # Measured targets describe the conv's output as it is: no new grid.
  measured = ctx.targets["source"] == "measured"
  ctx.inserted = insert.insert_recalib(
      ctx.model_t, ctx.sites, ctx.op_index, make_options,
      lambda site: None if measured else ctx.preact[site.name])
  ctx.tflite = tg.save_model(ctx.model_t)


def _label_safety(ctx: _Context) -> None:
  if not ctx.inserted:
    return
  ctx.inserted = label_safety.mark(ctx.model_t, ctx.inserted)
  ctx.tflite = tg.save_model(ctx.model_t)
  logging.info("label-safe sites (adapt under label correlation): %s",
               ", ".join(s.site.name for s in ctx.inserted if s.options.label_safe))


def _validate(ctx: _Context) -> None:
  """What convert writes must load where it is used (the evaluator, the firmware
  export): the same model checks, so a model they would refuse fails here."""
  from forge_tflm import model_check

  for what, data in (("FORGE", ctx.tflite), ("plain int8", ctx.plain_tflite)):
    try:
      model_check.check_model(data, f"the converted {what} model")
    except model_check.ModelCheckError as e:
      raise ConversionError(f"{e} (the evaluator and devices would refuse it)") from e


def _read_int8(ctx: _Context) -> None:
  """The int8 input model is the plain model; its convs are the sites' ops."""
  if ctx.options.targets != "measured":
    raise ConversionError("an int8 .tflite has no BatchNorm statistics left: its targets"
                          " are measured (--targets=recorded needs the float model)")
  ctx.int8 = ctx.frontend
  ctx.plain_tflite = ctx.frontend.data
  ctx.model_t = tg.load_model(ctx.plain_tflite)
  ctx.op_index = ctx.frontend.op_index(ctx.sites)


def _measure_targets(ctx: _Context) -> None:
  t0 = time.time()
  if ctx.int8 is None:  # A float model's conversion, past the parity gate: the int8 door.
    ctx.int8 = TfliteFrontend(ctx.source_path, data=ctx.plain_tflite)
  ctx.sites = ctx.int8.measure_targets(ctx.sites, ctx.calib_inputs, ctx.op_index)
  ctx.targets = {"source": "measured", "images": int(len(ctx.calib_inputs))}
  logging.info("measured the clean targets of %d sites on %d images in %.1f s",
               len(ctx.sites), len(ctx.calib_inputs), time.time() - t0)


def _source_parity(ctx: _Context) -> None:
  """The artifact in source mode must still be the input model."""
  if not ctx.inserted:
    return
  o = ctx.options
  with native_output_hidden():
    ctx.source_parity = parity.check_source_mode(
        plain_tflite=ctx.plain_tflite, tflite=ctx.tflite,
        x_int8=ctx.int8.quantize_input(ctx.calib_inputs), inserted=ctx.inserted,
        min_agreement=o.source_agreement)
  p = ctx.source_parity
  logging.info("source mode vs the input model on %d images: top-1 agreement %.1f%%,"
               " largest output difference %.3g", p.images, 100 * p.top1_agreement,
               p.max_output_difference)
  where = p.divergence()
  if where is not None:
    raise ConversionError(f"in source mode the artifact does not reproduce the input"
                          f" model: {where}")


# From a float model (Keras, ONNX), targets measured on its plain int8 conversion.
PASSES = (_load, _find_sites, _select, _calibration_inputs, _quantize, _clean_top1,
          _parity, _match, _measure_targets, _insert, _label_safety, _source_parity,
          _validate)
# From a float model, BN targets recorded at fold time (--targets=recorded).
RECORDED_PASSES = (_load, _find_sites, _select, _calibration_inputs, _quantize,
                   _clean_top1, _parity, _match, _preact_ranges, _insert, _label_safety,
                   _validate)
# From a full-int8 .tflite: targets measured on the calibration images.
TFLITE_PASSES = (_load, _find_sites, _select, _calibration_inputs, _read_int8,
                 _measure_targets, _clean_top1, _insert, _label_safety, _source_parity,
                 _validate)


def _passes(source_path: str, options: ConvertOptions) -> tuple:
  if os.path.splitext(source_path)[1].lower() == ".tflite":
    return TFLITE_PASSES
  return PASSES if options.targets == "measured" else RECORDED_PASSES


def _parity_json(ctx: _Context) -> dict:
  out = ctx.parity.to_json() if ctx.parity else {}
  if ctx.source_parity:
    out.update(ctx.source_parity.to_json())
  return out


def _io_quant(model_t) -> tuple[tuple[float, int], tuple[float, int]]:
  sg = model_t.subgraphs[0]  # Insertion leaves the model's input and output alone.
  return (tg.per_tensor_quant(sg.tensors[sg.inputs[0]]),
          tg.per_tensor_quant(sg.tensors[sg.outputs[0]]))


def convert(source_path: str, output: str, calibration,
            options: ConvertOptions = ConvertOptions(), command: str = "",
            plain_output: str | None = None) -> ConversionResult:
  """Converts a float model into the deployable FORGE artifact and writes it.

  `calibration`: the representative images, as an ImageSet (labels are not used),
  a uint8 [N, H, W, C] array or any iterable of uint8 H x W x C images.

  Writes `output` (.tflite), the manifest `<output stem>.json`, optionally the C
  array (`<stem>_model_data.h/.cc`) and the plain int8 model. All files appear
  together or not at all; the source is never overwritten.
  """
  t0 = time.time()
  if not os.path.isfile(source_path):
    raise ConversionError(f"model {source_path!r} does not exist or is not a file")
  paths = outputs.output_paths(output, options.c_array, plain_output)
  outputs.check_output_paths(paths, source_path)
  ctx = _Context(source_path, options, calibration, command)
  for step in _passes(source_path, options):
    step(ctx)

  input_quant, output_quant = _io_quant(ctx.model_t)
  manifest = outputs.build_manifest(
      tflite=ctx.tflite, source_path=source_path, source_sha256=file_sha256(source_path),
      frontend=ctx.frontend.name, options=options, all_sites=ctx.sites_found,
      inserted=ctx.inserted, input_quant=input_quant, output_quant=output_quant,
      command=command, parity=_parity_json(ctx),
      calibration={"images": int(len(ctx.calib_inputs)), "source": ctx.calibration_source,
                   "seed": options.calibration_seed, "preact_range": options.preact_range},
      targets=ctx.targets)
  files = {paths["manifest"]: manifest.dumps()}
  if options.c_array:
    name = outputs.c_identifier(output)
    header, source = outputs.c_array_sources(
        ctx.tflite, name, command or "forge_tflm.converter.convert(...)",
        manifest.model_sha256, os.path.basename(paths["c_header"]))
    files[paths["c_header"]] = header.encode()
    files[paths["c_source"]] = source.encode()
  if plain_output:
    files[paths["plain"]] = ctx.plain_tflite
  # The model is renamed last: it commits the set. A SIGKILL before its rename leaves
  # the old model beside a new manifest (every reader refuses the sha256 mismatch) or,
  # on a first convert, no model. With the manifest last, that first convert would
  # leave a FORGE model without one, which `evaluate` reads (its manifest is optional).
  files[paths["tflite"]] = ctx.tflite
  write_atomically(files)
  seconds = time.time() - t0
  logging.info("wrote %s (%d FORGE sites, %d bytes state) in %.1f s", output,
               len(manifest.sites), manifest.state_bytes, seconds)
  return ConversionResult(ctx.tflite, ctx.plain_tflite, manifest, tuple(paths.values()),
                          seconds)
