"""What an evaluation checks before any expensive work (data, corruptions, runs).

Each check fails with one line naming the file it is about: the artifact (read,
its manifest checked, its graph parsed), the FORGE sites the methods need, the
op's per-call size limit at the batch size, the float model, the output
directory.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from forge_tflm.artifact import Artifact, ArtifactError
from forge_tflm.fileio import check_input_file, check_output_dir


# Methods that act at the artifact's FORGE_RECALIB sites: on a model without
# any they would silently equal `source`.
FORGE_METHODS = ("forge", "forge-gated", "scale-adapt")
# Methods that call the op's C core at those sites (scale-adapt runs its own host
# step instead), so its per-call size limit applies to them.
OP_METHODS = ("source", "forge", "forge-gated")


def max_m() -> int:
  """The op's per-call limit on N*H*W (elements per channel): FORGE_RECALIB_MAX_M."""
  from forge_tflm.ops.options import core
  return int(core().MAX_M)


@dataclasses.dataclass(frozen=True)
class ForgeSite:
  name: str
  op_index: int
  pixels: int  # H*W of the site's tensor: elements per channel per image.


def load_artifact(path: str) -> Artifact:
  """Artifact.load of an input file (its errors name the model or the manifest)."""
  check_input_file(path, "artifact")
  return Artifact.load(path)


def forge_sites(artifact: Artifact) -> list[ForgeSite]:
  """The FORGE_RECALIB operators of the artifact's graph (parsed, not trusted to
  the manifest: a plain int8 model has none)."""
  from forge_tflm import tflite_graph as tg

  # Artifact.load has validated the graph (forge_tflm.model_check).
  model = tg.load_model(artifact.model)
  names = artifact.site_names
  sites = []
  sg = model.subgraphs[0]
  for i, op in enumerate(sg.operators):
    if tg.is_custom(model, op) and tg.op_name(model, op) == tg.FORGE_RECALIB:
      shape = [int(d) for d in np.asarray(sg.tensors[op.inputs[0]].shape).ravel()]
      pixels = int(np.prod(shape[1:-1])) if len(shape) > 2 else 1
      sites.append(ForgeSite(names.get(i, f"{tg.FORGE_RECALIB}@{i}"), i, max(1, pixels)))
  return sites


def input_shape(artifact: Artifact) -> tuple[int, ...]:
  """The model input's shape without the batch dimension (the graph is validated)."""
  from forge_tflm import tflite_graph as tg

  sg = tg.load_model(artifact.model).subgraphs[0]
  return tuple(int(d) for d in np.asarray(sg.tensors[sg.inputs[0]].shape).ravel()[1:])


def max_batch_size(sites: list[ForgeSite]) -> int | None:
  """The largest batch every FORGE site accepts in one call (None: no sites)."""
  if not sites:
    return None
  return max_m() // max(s.pixels for s in sites)


def check_artifact(artifact: Artifact, methods, batch_size: int) -> list[ForgeSite]:
  """Refuses FORGE methods on a model without FORGE ops and a batch size over the
  op's per-call limit; returns the sites."""
  sites = forge_sites(artifact)
  needing = [m for m in methods if m in FORGE_METHODS]
  if needing and not sites:
    raise ArtifactError(
        f"{artifact.path} has no FORGE_RECALIB ops (a plain int8 model?): method(s)"
        f" {', '.join(needing)} adapt at FORGE sites; evaluate the model written by"
        " forge_tflm convert --output, or use method source only")
  limit = max_batch_size(sites)
  if limit is not None and batch_size > limit and any(m in methods for m in OP_METHODS):
    big = max(sites, key=lambda s: s.pixels)
    raise ValueError(
        f"batch size {batch_size} is over the FORGE op's per-call limit for {artifact.path}:"
        f" N*H*W <= {max_m()} (2^22) elements per channel, and site {big.name} has"
        f" H*W = {big.pixels}, so the batch size must be <= {limit}")
  return sites


def check_outputs(output_dir: str | None) -> None:
  if output_dir:
    check_output_dir(output_dir, "output directory")
