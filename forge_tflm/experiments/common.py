"""What every experiment shares: its context, the bundled artifacts, provenance and
the files it writes."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import importlib.metadata
import json
import os
import platform
import subprocess
import time

from absl import logging

from forge_tflm.sweep import Executor, InlineExecutor

# name -> "module" (its run(ctx) -> Outcome) or "module:function". Only experiments
# that exist are listed.
EXPERIMENTS = {
    "selective": "forge_tflm.experiments.selective",
    "momentum": "forge_tflm.experiments.sweeps:run_momentum",
    "batch-size": "forge_tflm.experiments.sweeps:run_batch_size",
    "baselines": "forge_tflm.experiments.tables:run_baselines",
    "per-corruption": "forge_tflm.experiments.tables:run_per_corruption",
    "gate": "forge_tflm.experiments.tables:run_gate",
    "generalization": "forge_tflm.experiments.generalization",
    "gap": "forge_tflm.experiments.gap",
    "bit-width": "forge_tflm.experiments.bit_width",
    "lotv": "forge_tflm.experiments.lotv",
    "activation": "forge_tflm.experiments.activation",
}

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUNDLED_MODELS = {
    "resnet20_cifar10": os.path.join(REPO_ROOT, "models", "resnet20_cifar10.keras"),
    "mobilenet_v2_0.5_cifar10": os.path.join(REPO_ROOT, "models",
                                            "mobilenet_v2_0.5_cifar10.keras"),
}


@dataclasses.dataclass(frozen=True)
class ExperimentContext:
  """Where an experiment reads and writes, and how it runs its units."""
  data_dir: str | None
  output_root: str = "results"
  artifact_dir: str = "runs/experiments"  # converted bundled models (not committed)
  executor: Executor = dataclasses.field(default_factory=InlineExecutor)
  command: str = ""
  images: int = 0  # per evaluation stream (0: the whole split)
  progress: bool = True
  # Datasets other than CIFAR-10: name -> local path (default: the folder of that name
  # beside data_dir, e.g. ../shared/datasets/cifar100; tensorflow-datasets without one).
  dataset_dirs: dict = dataclasses.field(default_factory=dict)
  # TrainConfig overrides for experiments that must train a model (e.g. {"epochs": 1}).
  train: dict = dataclasses.field(default_factory=dict)
  # ConvertOptions overrides (e.g. {"clean_check": "warn"} for a model trained 1 epoch).
  convert: dict = dataclasses.field(default_factory=dict)

  def output_dir(self, name: str) -> str:
    return os.path.join(self.output_root, name)

  def dataset_dir(self, name: str) -> str | None:
    if name in self.dataset_dirs:
      return self.dataset_dirs[name]
    if self.data_dir is None:
      return None
    if name == "cifar10":
      return self.data_dir
    return os.path.join(os.path.dirname(os.path.abspath(self.data_dir)), name)


@dataclasses.dataclass(frozen=True)
class Outcome:
  """What an experiment hands back to be written."""
  data: dict  # JSON-ready numbers
  markdown: str  # tables and the comparison with the paper
  figure: object = None  # fn(path) that draws result.png
  artifacts: tuple[str, ...] = ()  # paths whose hashes go into result.json


def bundled_artifact(ctx: ExperimentContext, model: str = "resnet20_cifar10",
                     sites="all", **options) -> str:
  """The bundled model converted with the default options (and `sites`, and `options`:
  ConvertOptions fields), made once per model file content and options and kept in
  ctx.artifact_dir."""
  return converted_artifact(ctx, BUNDLED_MODELS[model], "cifar10", sites, **options)


def converted_artifact(ctx: ExperimentContext, source: str, dataset: str,
                       sites="all", **overrides) -> str:
  """`source` (.keras) converted with the default options (and `sites`, ctx.convert's
  overrides and `overrides`), calibrated on `dataset`'s training split; made once per
  model file content and options, and kept in ctx.artifact_dir."""
  from forge_tflm.converter.options import ConvertOptions  # pylint: disable=import-outside-toplevel

  options = ConvertOptions(sites=sites if sites == "all" else tuple(sites),
                           **{**ctx.convert, **overrides})
  path = artifact_path(ctx.artifact_dir, source, options)
  if os.path.exists(path) and os.path.exists(path[:-len(".tflite")] + ".json"):
    return path
  from forge_tflm.quiet import import_quietly  # pylint: disable=import-outside-toplevel
  import_quietly("tensorflow", "keras")
  from forge_tflm.converter.pipeline import convert  # pylint: disable=import-outside-toplevel
  from forge_tflm.data import load_dataset  # pylint: disable=import-outside-toplevel

  logging.info("converting %s (sites: %s) to %s", source, sites, path)
  calibration = load_dataset(dataset, "train", ctx.dataset_dir(dataset))
  convert(source, path, calibration, options,
          command=f"forge_tflm.experiments.common.converted_artifact({source!r},"
                  f" {dataset!r}, {sites!r})")
  return path


def artifact_path(folder: str, source: str, options) -> str:
  """Where `source` converted with `options` is kept: keyed by the model file's content
  and every conversion option, so a changed default converts again."""
  model = os.path.basename(source)[:-len(".keras")]
  with open(source, "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()[:12]
  key = hashlib.sha256(repr(options).encode()).hexdigest()[:8]
  return os.path.join(folder, f"{model}-{digest}-{key}.tflite")


def _sha256(path: str) -> str:
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


def versions() -> dict:
  out = {"python": platform.python_version()}
  for dist in ("forge_tflm", "numpy", "ai-edge-litert", "tensorflow", "ray"):
    try:
      out[dist] = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
      pass
  try:
    out["git_commit"] = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
        check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    pass
  return out


def data_source(data_dir: str | None) -> str:
  return os.path.abspath(data_dir) if data_dir else "tensorflow-datasets"


def artifact_targets(paths) -> str:
  """Where the FORGE targets of `paths` come from, as their manifests say ("measured",
  "recorded", both comma-separated; "" when no artifact has a manifest)."""
  found = set()
  for p in paths:
    manifest = p[:-len(".tflite")] + ".json"
    if p.endswith(".tflite") and os.path.exists(manifest):
      with open(manifest) as f:
        found.add(json.load(f).get("targets", {}).get("source", ""))
  return ", ".join(sorted(found - {""}))


def run_experiment(name: str, ctx: ExperimentContext) -> str:
  """Runs experiment `name`; writes result.json/.md/.png into ctx.output_dir(name),
  all or none (each through a temporary file). Returns the directory."""
  from forge_tflm.fileio import atomic_path  # pylint: disable=import-outside-toplevel

  if name not in EXPERIMENTS:
    raise ValueError(f"unknown experiment {name!r}; known: {', '.join(EXPERIMENTS)}")
  t0 = time.time()
  module, _, function = EXPERIMENTS[name].partition(":")
  outcome = getattr(importlib.import_module(module), function or "run")(ctx)
  seconds = time.time() - t0
  out = ctx.output_dir(name)
  os.makedirs(out, exist_ok=True)
  doc = {"experiment": name, "command": ctx.command, "data_source": data_source(ctx.data_dir),
         "artifacts": {p: _sha256(p) for p in outcome.artifacts},
         "targets": artifact_targets(outcome.artifacts),
         "versions": versions(), "executor": ctx.executor.name,
         "seconds": round(seconds, 1), "results": outcome.data}
  header = (f"<!-- Generated by `{ctx.command}` ({time.strftime('%Y-%m-%d')},"
            f" {seconds:.0f} s); do not edit. -->\n\n")
  if outcome.figure is not None:
    with atomic_path(os.path.join(out, "result.png"), ".png") as tmp:
      outcome.figure(tmp)
  with atomic_path(os.path.join(out, "result.md"), ".md") as tmp:
    with open(tmp, "w") as f:
      f.write(header + outcome.markdown.rstrip() + "\n")
  with atomic_path(os.path.join(out, "result.json"), ".json") as tmp:
    with open(tmp, "w") as f:
      json.dump(doc, f, indent=1)
      f.write("\n")
  return out


def eval_clean(ctx: ExperimentContext, images: int | None = None, split: str = "test"):
  """The clean evaluation split (ctx.images, or `images` when the experiment has its
  own default, random subset; 0: all of it)."""
  from forge_tflm.data import load_dataset  # pylint: disable=import-outside-toplevel

  n = ctx.images or images or 0
  return load_dataset("cifar10", split, ctx.data_dir).random_subset(n or None, 0)


def corrupted_streams(ctx: ExperimentContext, images: int | None = None, severity: int = 5,
                      include_clean: bool = False):
  """(clean split, the 15 evaluation streams at `severity`) with cached corruptions."""
  from forge_tflm.corruptions import CORRUPTIONS  # pylint: disable=import-outside-toplevel
  from forge_tflm.evaluation.streams import generated_streams  # pylint: disable=import-outside-toplevel

  clean = eval_clean(ctx, images)
  return clean, list(generated_streams(clean, CORRUPTIONS, severity,
                                       include_clean=include_clean))


def evaluate(ctx: ExperimentContext, config, streams, artifact: str,
             keras_model: str | None = None) -> dict:
  """forge_tflm eval's run on ctx's executor (no files): its JSON document."""
  from forge_tflm.evaluation.run import run_evaluation  # pylint: disable=import-outside-toplevel

  return run_evaluation(config, streams, artifact_path=artifact, keras_path=keras_model,
                        output_dir=None, command=ctx.command, data_description="",
                        show_progress=ctx.progress,
                        executor=ctx.executor)


def site_moments(model, x_int8, batch: int = 250) -> dict:
  """Per site, per image and channel, the spatial mean and mean square of the conv
  output the op sees (dequantized): {site: (mean [N, C], square [N, C])}, float64.
  The model runs in source mode (as converted)."""
  import numpy as np  # pylint: disable=import-outside-toplevel

  found: dict = {}

  def capture(node, x, mode):
    q, c = node.quant, x.shape[-1]
    xf = (x.reshape(x.shape[0], -1, c).astype(np.float64) - q.z_x) * q.s_x
    m, s = found.setdefault(node.name, ([], []))
    m.append(xf.mean(1))
    s.append((xf * xf).mean(1))
    return node.op(x, mode="source")

  model.forge_kernel = capture
  try:
    for start in range(0, len(x_int8), batch):
      model.run(x_int8[start:start + batch], mode="source")
  finally:
    model.forge_kernel = None
  return {k: (np.concatenate(m), np.concatenate(s)) for k, (m, s) in found.items()}


def cached_evaluate(ctx: ExperimentContext, config, streams, artifact: str,
                    keras_model: str | None = None) -> dict:
  """evaluate(), its document kept in ctx.artifact_dir under a key of everything that
  determines it (artifact and float model bytes, config, streams' images and orders),
  so experiments reporting different views of one evaluation run it once."""
  from forge_tflm.evaluation import resume  # pylint: disable=import-outside-toplevel
  from forge_tflm.fileio import atomic_path  # pylint: disable=import-outside-toplevel

  # The gate's derived settings follow from the config and the artifact, both keyed.
  key = hashlib.sha256(json.dumps(
      [_sha256(artifact), _sha256(keras_model) if keras_model else None,
       dataclasses.asdict(config),
       [(s.name, resume.stream_digest(s), s.spec) for s in streams]],
      sort_keys=True, default=str).encode()).hexdigest()[:16]
  path = os.path.join(ctx.artifact_dir, f"eval-{key}.json")
  if os.path.exists(path):
    logging.info("evaluation loaded from %s", path)
    with open(path) as f:
      return json.load(f)
  doc = evaluate(ctx, config, streams, artifact, keras_model)
  os.makedirs(ctx.artifact_dir, exist_ok=True)
  with atomic_path(path, ".json") as tmp:
    with open(tmp, "w") as f:
      json.dump(doc, f)
  return doc


@contextlib.contextmanager
def plot(path: str, size=(6, 3.4)):
  """A matplotlib Axes (headless backend) saved to `path` as PNG on exit."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

  fig, ax = plt.subplots(figsize=size)
  try:
    yield ax
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")
  finally:
    plt.close(fig)


def grouped_bars(path: str, groups: dict, ylabel: str, title: str = "",
                 size=(7, 3.4)) -> None:
  """A grouped bar chart: groups {label: {series: value}} (missing values skipped)."""
  import numpy as np  # pylint: disable=import-outside-toplevel

  labels = list(groups)
  series = list(dict.fromkeys(s for g in groups.values() for s in g))
  width = 0.8 / max(1, len(series))
  with plot(path, size) as ax:
    for i, name in enumerate(series):
      xs = [j + (i - (len(series) - 1) / 2) * width for j, g in enumerate(labels)
            if groups[g].get(name) is not None]
      ys = [groups[g][name] for g in labels if groups[g].get(name) is not None]
      ax.bar(xs, ys, width, label=name)
    ax.axhline(0, color="gray", lw=0.8)
    ax.set_xticks(np.arange(len(labels)))
    ax.set_xticklabels(labels, rotation=45 if len(labels) > 5 else 0, ha="right"
                       if len(labels) > 5 else "center", fontsize=8)
    ax.set_ylabel(ylabel)
    if title:
      ax.set_title(title)
    ax.legend(fontsize=8)
