"""What an evaluation checks before any expensive work (data, corruptions, runs).

Each check fails with one line naming the file it is about: the artifact (read,
its manifest checked, its graph parsed), the FORGE sites the methods need, the
op's per-call size limit at the batch size, the float model, the output
directory.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from forge_tflm.artifact import Artifact, ArtifactError, manifest_path
from forge_tflm.fileio import check_output_dir


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
  """Artifact.load with every failure a one-line error that names the file."""
  if not os.path.exists(path):
    raise FileNotFoundError(f"artifact {path} does not exist")
  if not os.path.isfile(path):
    raise IsADirectoryError(f"artifact {path} is not a file")
  try:
    return Artifact.load(path)
  except ArtifactError as e:
    mpath = manifest_path(path)
    text = str(e)
    # The model's own errors name it; the manifest's (KeyError, ...) may not.
    raise ArtifactError(text if path in text or mpath in text
                        else f"{mpath}: {text}") from e
  except UnicodeDecodeError as e:
    raise ArtifactError(f"{manifest_path(path)}: not JSON (not UTF-8 text)") from e
  except OSError as e:
    raise OSError(f"artifact {path}: {e.strerror or e}") from e


def forge_sites(artifact: Artifact) -> list[ForgeSite]:
  """The FORGE_RECALIB operators of the artifact's graph (parsed, not trusted to
  the manifest: a plain int8 model has none)."""
  from forge_tflm import tflite_graph as tg

  try:
    model = tg.load_model(artifact.model)
  except tg.ModelFormatError as e:
    raise ArtifactError(f"{artifact.path}: {e}") from e
  names = artifact.site_names
  sites = []
  try:
    sg = model.subgraphs[0]
    for i, op in enumerate(sg.operators):
      if tg.is_custom(model, op) and tg.op_name(model, op) == tg.FORGE_RECALIB:
        shape = [int(d) for d in np.asarray(sg.tensors[op.inputs[0]].shape).ravel()]
        pixels = int(np.prod(shape[1:-1])) if len(shape) > 2 else 1
        sites.append(ForgeSite(names.get(i, f"{tg.FORGE_RECALIB}@{i}"), i, max(1, pixels)))
  except (IndexError, TypeError, AttributeError) as e:
    raise ArtifactError(f"{artifact.path}: malformed graph ({type(e).__name__}: {e})") from e
  return sites


def input_shape(artifact: Artifact) -> tuple[int, ...] | None:
  """The model input's shape without the batch dimension (None if unreadable)."""
  from forge_tflm import tflite_graph as tg

  try:
    model = tg.load_model(artifact.model)
    sg = model.subgraphs[0]
    shape = np.asarray(sg.tensors[sg.inputs[0]].shape).ravel()
    return tuple(int(d) for d in shape[1:])
  except Exception:  # pylint: disable=broad-except
    return None  # forge_sites() reports a malformed model with its file.


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


def check_file(path: str, what: str) -> None:
  if not os.path.exists(path):
    raise FileNotFoundError(f"{what} {path} does not exist")
  if not os.path.isfile(path):
    raise IsADirectoryError(f"{what} {path} is not a file")
  if not os.access(path, os.R_OK):
    raise PermissionError(f"{what} {path} is not readable")


def check_outputs(output_dir: str | None) -> None:
  if output_dir:
    check_output_dir(output_dir, "output directory")
