"""Layer selection: which FORGE sites are worth adapting, decided at design time.

Each site is ranked by the recovery it gives adapted alone (every other site as
converted), measured on corruptions that are NOT the evaluation ones: by default the
generator's four held-out corruptions (corruptions.HELD_OUT_CORRUPTIONS) at severity 5
on training images. Then top-k (the k best alone) or greedy (add, k times, the site
whose addition helps the set most) picks the sites; `convert --sites=@FILE` takes the
file write_sites_file() makes. Selection never sees the evaluation stream; the same
machinery measured on the evaluation corruptions gives the oracle ranking it is
compared with (`compare_rankings`).

Candidate subsets are measured on the all-sites artifact with the unselected sites in
source mode (SegmentedModel.adapt_only), which is the subset artifact up to the int8
rounding of the ops it leaves out. Every (subset, stream) is one unit for a
forge_tflm.sweep executor: inline, local worker processes, or Ray.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from typing import Sequence

import numpy as np

from forge_tflm.corruptions import ALL_CORRUPTIONS, CORRUPTIONS, HELD_OUT_CORRUPTIONS
from forge_tflm.sweep import Executor, InlineExecutor, run_units

STRATEGIES = ("top-k", "greedy")


@dataclasses.dataclass(frozen=True)
class StreamSpec:
  """One corrupted stream, described by value so that any worker can rebuild it."""
  corruption: str
  data_dir: str | None = None
  dataset: str = "cifar10"
  split: str = "train"
  images: int = 2000  # random subset of the split (0: all)
  subset_seed: int = 0
  severity: int = 5
  corruption_seed: int = 0
  cache_dir: str | None = None

  def __post_init__(self):
    if self.corruption not in ALL_CORRUPTIONS:
      raise ValueError(f"unknown corruption {self.corruption!r}; known: "
                       f"{', '.join(ALL_CORRUPTIONS)}")
    if self.images < 0:
      raise ValueError("images must be >= 0 (0: the whole split)")

  def load(self) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images [N,H,W,3] and labels; corrupted once, then from the shared cache."""
    from forge_tflm.corruptions import corrupt_cached  # pylint: disable=import-outside-toplevel

    clean = _clean_split(self.dataset, self.split, self.data_dir, self.images,
                         self.subset_seed)
    images = corrupt_cached(clean.images, self.corruption, self.severity,
                            seed=self.corruption_seed, cache_dir=self.cache_dir)
    return images, np.asarray(clean.labels)


@functools.lru_cache(maxsize=4)
def _clean_split(dataset, split, data_dir, images, seed):
  from forge_tflm.data import load_dataset  # pylint: disable=import-outside-toplevel

  data = load_dataset(dataset, split, data_dir)
  return data.random_subset(images, seed) if images else data


@dataclasses.dataclass(frozen=True)
class SiteUnit:
  """Accuracy of `artifact` over one stream with only `sites` adapting.

  sites: None = every site adapts; () = none (the int8 source)."""
  artifact: str
  stream: StreamSpec
  sites: tuple[str, ...] | None
  batch_size: int = 64
  order_seed: int = 0
  kernels: str = "optimized"


@functools.lru_cache(maxsize=4)
def _artifact(path: str):
  from forge_tflm.artifact import Artifact  # pylint: disable=import-outside-toplevel
  return Artifact.load(path, require_manifest=True)


@functools.lru_cache(maxsize=2)
def worker_model(path: str, kernels: str):
  """The artifact and its SegmentedModel with `kernels`, once per worker: every unit
  of a worker runs on this one model (unit_accuracy restores what it changes)."""
  from forge_tflm.runtime.segmented import SegmentedModel  # pylint: disable=import-outside-toplevel

  artifact = _artifact(path)
  return artifact, SegmentedModel.from_artifact(artifact, kernels)


@functools.lru_cache(maxsize=20)
def stream_inputs(path: str, stream: StreamSpec):
  """The artifact's int8 inputs for `stream` and its labels, once per worker."""
  from forge_tflm.runtime.inputs import model_input  # pylint: disable=import-outside-toplevel

  images, labels = stream.load()
  return model_input(_artifact(path), images), labels


def stream_accuracy(model, x, labels, mode: str, batch_size: int,
                    order_seed: int = 0) -> float:
  """Accuracy of a SegmentedModel over one shuffled ordering of (x, labels) in `mode`,
  its state reset first: every sweep unit of a single stream measures this."""
  from forge_tflm.evaluation.protocol import ordering, run_stream  # pylint: disable=import-outside-toplevel

  model.reset()
  return float(run_stream(lambda xb: model.dequantize_output(model.run(xb, mode=mode)),
                          x, labels, ordering(len(labels), 0, order_seed), batch_size))


def unit_accuracy(unit: SiteUnit) -> float:
  """The sweep function: one unit -> accuracy (state reset first, shuffled order)."""
  _, model = worker_model(unit.artifact, unit.kernels)
  x, labels = stream_inputs(unit.artifact, unit.stream)
  model.adapt_only(unit.sites)
  try:
    return stream_accuracy(model, x, labels, "adapt", unit.batch_size, unit.order_seed)
  finally:
    model.adapt_only(None)


def prepare(streams: Sequence[StreamSpec]) -> None:
  """Generates every stream's corruption once, here, so workers only read the cache."""
  for s in streams:
    s.load()


def site_names(artifact_path: str) -> list[str]:
  from forge_tflm.artifact import Artifact  # pylint: disable=import-outside-toplevel

  artifact = Artifact.load(artifact_path, require_manifest=True)
  return [s.name for s in artifact.manifest.sites]


def measure_subsets(artifact_path: str, streams: Sequence[StreamSpec],
                    subsets: Sequence[tuple[str, ...] | None], *, batch_size: int = 64,
                    kernels: str = "optimized", executor: Executor | None = None,
                    what: str = "subsets", progress: bool = True) -> list[dict]:
  """Per subset, {corruption: accuracy} over `streams` (one unit per pair)."""
  units = [SiteUnit(artifact_path, s, None if sub is None else tuple(sub), batch_size,
                    kernels=kernels) for sub in subsets for s in streams]
  prepare(streams)
  acc = run_units(executor or InlineExecutor(), unit_accuracy, units, what, progress)
  n = len(streams)
  return [{s.corruption: acc[i * n + j] for j, s in enumerate(streams)}
          for i in range(len(subsets))]


@dataclasses.dataclass(frozen=True)
class Ranking:
  """Accuracies that rank the sites: per corruption, for the int8 source, all sites
  adapting, and each site adapting alone."""
  sites: tuple[str, ...]  # model order
  source: dict
  all_sites: dict
  alone: dict  # site -> {corruption: accuracy}

  def recovery(self, accuracy: dict) -> float:
    """Mean accuracy gain over the source, in points."""
    return 100 * float(np.mean([accuracy[c] - self.source[c] for c in self.source]))

  def ranked(self) -> list[str]:
    """Sites by recovery alone, best first (ties keep model order)."""
    return sorted(self.sites, key=lambda s: -self.recovery(self.alone[s]))

  def to_json(self) -> dict:
    return {"sites": list(self.sites), "source": self.source, "all_sites": self.all_sites,
            "alone": self.alone,
            "recovery_alone": {s: round(self.recovery(self.alone[s]), 3)
                               for s in self.sites},
            "recovery_all_sites": round(self.recovery(self.all_sites), 3)}


def rank_sites(artifact_path: str, streams: Sequence[StreamSpec], *, batch_size: int = 64,
               kernels: str = "optimized", executor: Executor | None = None,
               progress: bool = True) -> Ranking:
  names = tuple(site_names(artifact_path))
  subsets = [(), None] + [(s,) for s in names]
  acc = measure_subsets(artifact_path, streams, subsets, batch_size=batch_size,
                        kernels=kernels, executor=executor, what="site rankings",
                        progress=progress)
  return Ranking(names, acc[0], acc[1], dict(zip(names, acc[2:])))


@dataclasses.dataclass(frozen=True)
class SelectConfig:
  """What `forge_tflm select` measures on and how it picks."""
  strategy: str = "top-k"
  k: int = 3
  corruptions: tuple[str, ...] = HELD_OUT_CORRUPTIONS
  split: str = "train"
  images: int = 2000
  severity: int = 5
  batch_size: int = 64
  dataset: str = "cifar10"
  kernels: str = "optimized"

  def __post_init__(self):
    if self.strategy not in STRATEGIES:
      raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, not "
                       f"{self.strategy!r}")
    if not isinstance(self.k, int) or isinstance(self.k, bool) or self.k < 1:
      raise ValueError(f"k must be an integer >= 1, not {self.k!r}")
    if not self.corruptions:
      raise ValueError("no corruptions to rank on")
    unknown = [c for c in self.corruptions if c not in ALL_CORRUPTIONS]
    if unknown:
      raise ValueError(f"unknown corruption(s) {', '.join(unknown)}; known: "
                       f"{', '.join(ALL_CORRUPTIONS)}")
    if self.batch_size < 1 or self.images < 0 or not 1 <= self.severity <= 5:
      raise ValueError("batch_size must be >= 1, images >= 0, severity 1..5")

  def check_sites(self, sites: Sequence[str]) -> None:
    """k of these sites can be picked: more would silently select them all."""
    if self.k > len(sites):
      raise ValueError(f"k={self.k} but the artifact has {len(sites)} FORGE sites: choose"
                       f" k <= {len(sites)}")

  @property
  def sees_evaluation(self) -> bool:
    """True when ranking on evaluation corruptions of the evaluation split (the
    oracle): a design-time selection must not."""
    return self.split == "test" and any(c in CORRUPTIONS for c in self.corruptions)

  def streams(self, data_dir: str | None, cache_dir: str | None = None) -> list[StreamSpec]:
    return [StreamSpec(c, data_dir, self.dataset, self.split, self.images,
                       severity=self.severity, cache_dir=cache_dir)
            for c in self.corruptions]


@dataclasses.dataclass(frozen=True)
class Selection:
  sites: tuple[str, ...]  # model order
  config: SelectConfig
  ranking: Ranking
  greedy_steps: tuple = ()  # greedy: (site added, recovery of the set) per step
  recovery: float = 0.0  # of the selected set on the ranking streams

  def to_json(self) -> dict:
    return {"sites": list(self.sites), "strategy": self.config.strategy,
            "k": self.config.k, "recovery_selected": round(self.recovery, 3),
            "config": dataclasses.asdict(self.config), "ranking": self.ranking.to_json(),
            "greedy_steps": [list(s) for s in self.greedy_steps]}


def select(artifact_path: str, data_dir: str | None, config: SelectConfig = SelectConfig(),
           *, executor: Executor | None = None, cache_dir: str | None = None,
           progress: bool = True) -> Selection:
  """Ranks the artifact's sites on config's streams and picks config.k of them."""
  config.check_sites(site_names(artifact_path))
  streams = config.streams(data_dir, cache_dir)
  ranking = rank_sites(artifact_path, streams, batch_size=config.batch_size,
                       kernels=config.kernels, executor=executor, progress=progress)
  k = config.k
  steps = []
  if config.strategy == "top-k":
    chosen = ranking.ranked()[:k]
  else:
    chosen = []
    for _ in range(k):
      rest = [s for s in ranking.sites if s not in chosen]
      if len(chosen) == 0:  # The first step is the ranking itself.
        scores = [ranking.recovery(ranking.alone[s]) for s in rest]
      else:
        acc = measure_subsets(artifact_path, streams, [tuple(chosen + [s]) for s in rest],
                              batch_size=config.batch_size, kernels=config.kernels,
                              executor=executor, what=f"greedy step {len(chosen) + 1}",
                              progress=progress)
        scores = [ranking.recovery(a) for a in acc]
      best = int(np.argmax(scores))  # First best: ties keep model order.
      chosen.append(rest[best])
      steps.append((rest[best], round(float(scores[best]), 3)))
  ordered = tuple(s for s in ranking.sites if s in chosen)
  if config.strategy == "greedy":
    recovery = steps[-1][1]
  else:
    recovery = ranking.recovery(measure_subsets(
        artifact_path, streams, [ordered], batch_size=config.batch_size,
        kernels=config.kernels, executor=executor, what="selected set",
        progress=progress)[0])
  return Selection(ordered, config, ranking, tuple(steps), recovery)


def artifact_sha256(path: str) -> str:
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


def write_sites_file(path: str, selection: Selection, artifact_path: str,
                     command: str | None = None) -> None:
  """The JSON `convert --sites=@path` reads ({"sites": [...]}), with how it was made."""
  from forge_tflm.fileio import atomic_path  # pylint: disable=import-outside-toplevel

  data = {"command": command, "artifact": artifact_path,
          "artifact_sha256": artifact_sha256(artifact_path), **selection.to_json()}
  with atomic_path(path, ".json") as tmp:
    with open(tmp, "w") as f:
      json.dump(data, f, indent=1)
      f.write("\n")


def ranking_table(selection: Selection) -> str:
  """Markdown: each site's recovery alone, and which ones were selected."""
  r = selection.ranking
  corr = list(r.source)
  lines = [f"ranked on {', '.join(corr)} (severity {selection.config.severity}, "
           f"{selection.config.split} split, {selection.config.images or 'all'} images, "
           f"batch {selection.config.batch_size})", "",
           "| rank | site | recovery alone (points) | selected |", "| ---: | --- | ---: | :-: |"]
  for i, s in enumerate(r.ranked(), 1):
    lines.append(f"| {i} | {s} | {r.recovery(r.alone[s]):+.2f} | "
                 f"{'yes' if s in selection.sites else ''} |")
  lines += ["", f"all {len(r.sites)} sites: {r.recovery(r.all_sites):+.2f} points; "
            f"selected {len(selection.sites)} ({selection.config.strategy}): "
            f"{selection.recovery:+.2f} points; int8 source "
            f"{100 * np.mean(list(r.source.values())):.2f}%"]
  return "\n".join(lines)
