"""Mutation fuzz of `convert`'s int8 door (issue 53): mutated full-int8 .tflite models.

What `forge_tflm convert --model=X.tflite` runs after parsing its flags
(converter.pipeline.convert: the model check, site search, target measurement,
insertion, the source-mode check, every writer), on mutants of two seeds:
  resnet20  the bundled ResNet-20's plain int8 model (convert --plain_output), input
            contract 0..1;
  mlperf    MLPerf Tiny's int8 ResNet-8 as it ships (../shared/models), 0..255.
The mutators are artifact_fuzz's (flatbuffer fields through the object
API: shapes, types, indices, buffers, quantization, options, opcodes, inputs and
outputs; aligned words; bit and byte flips; truncation), each mutant in a child forked
from a worker that loaded everything once (artifact_fuzz.run_action: time and memory
limits, a crash or hang attributed to one mutant, kept for reproduction).

Outcomes: ok (converted; every output written and the artifact loads in the
evaluator), rejected (a one-line ValueError or OSError, what the CLI prints as one
line, and no output written), error (any other exception, a multi-line message, a
partial output set, or an artifact the evaluator refuses), crash, hang. A
rejection's origin: validator (forge_tflm.model_check), converter (ConversionError),
other.

  python -m forge_tflm.testing.convert_fuzz --mutants=2000 --workers=2   # summary JSON
  python -m forge_tflm.testing.convert_fuzz --load FILE.tflite --seed=mlperf   # reproduce
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import sys
import tempfile

import numpy as np

from forge_tflm.testing import artifact_fuzz as af

REPO_ROOT = af.REPO_ROOT
SHARED = os.path.join(os.path.dirname(REPO_ROOT), "shared")
DATA_DIR = os.path.join(SHARED, "datasets", "cifar10")
MLPERF = os.path.join(SHARED, "models", "mlperf_tiny_ic", "pretrainedResnet_quant.tflite")
SEED_NAMES = ("resnet20", "mlperf")
OUTCOMES, FAILURES = af.OUTCOMES, af.FAILURES
# Few calibration images: every stage runs on them, at a fraction of the cost.
CALIBRATION_IMAGES = 4


def options(seed: str):
  from forge_tflm.artifact import InputContract
  from forge_tflm.converter.options import ConvertOptions

  high = 255.0 if seed == "mlperf" else 1.0
  return ConvertOptions(calibration_size=CALIBRATION_IMAGES, parity_images=4,
                        c_array=True, clean_check="warn",
                        input_contract=InputContract(kind="range", low=0.0, high=high))


def seed_paths(workdir: str) -> dict[str, str]:
  """name -> seed .tflite: the plain ResNet-20 (the device tests' conversion, shared
  through the build cache) and MLPerf's model."""
  from forge_tflm.deploy.targets import plain_resnet20

  missing = [p for p in (MLPERF, DATA_DIR) if not os.path.exists(p)]
  if missing:
    raise FileNotFoundError(f"needs {', '.join(missing)}")
  return {"resnet20": plain_resnet20(), "mlperf": MLPERF}


def calibration_file(workdir: str) -> str:
  """The first CALIBRATION_IMAGES training images as one .npy for the workers."""
  from forge_tflm.data import load_dataset

  path = os.path.join(workdir, "calibration.npy")
  if not os.path.exists(path):
    images = load_dataset("cifar10", "train", DATA_DIR).images[:CALIBRATION_IMAGES]
    np.save(path, np.ascontiguousarray(images, dtype=np.uint8))
  return path


def convert_one(path: str, seed: str, calibration: np.ndarray, out_dir: str
                ) -> tuple[str, str]:
  """convert(path) as the CLI runs it; (outcome, message)."""
  from forge_tflm.artifact import Artifact
  from forge_tflm.converter.pipeline import convert
  from forge_tflm.converter.sites import ConversionError
  from forge_tflm.model_check import ModelCheckError

  for old in glob.glob(os.path.join(out_dir, "out*")):
    os.remove(old)
  out = os.path.join(out_dir, "out.tflite")
  try:
    result = convert(path, out, calibration, options(seed),
                     plain_output=os.path.join(out_dir, "out_plain.tflite"))
  except (ValueError, OSError) as e:  # What the CLI prints as one line.
    msg = str(e)
    left = sorted(os.path.basename(p) for p in glob.glob(os.path.join(out_dir, "out*")))
    if "\n" in msg or not msg:
      return "error", f"multi-line or empty {type(e).__name__}: {msg!r}"[:500]
    if left:
      return "error", f"rejected ({msg[:200]}) but left {left}"
    origin = ("validator" if isinstance(e.__cause__ or e, ModelCheckError)
              else "converter" if isinstance(e, ConversionError) else "other")
    return "rejected", f"[{origin}] {msg}"[:500]
  except Exception as e:  # noqa: BLE001 - any other exception is a finding.
    return "error", f"{type(e).__name__}: {e}"[:500]
  missing = [p for p in result.written if not os.path.isfile(p)]
  if missing:
    return "error", f"converted but {missing} missing"
  try:
    Artifact.load(out)
  except ValueError as e:
    return "error", f"converted an artifact the evaluator refuses: {e}"[:500]
  return "ok", ""


def seed_for(index: int, run_seed: int = 0) -> str:
  """ResNet-20 one mutant in 4 (an accepted one costs ~0.8 s of CPU), MLPerf's 3."""
  return "resnet20" if np.random.default_rng([run_seed, index, 3]).random() < 0.25 \
      else "mlperf"


def run_mutant(seeds: dict, calibration: np.ndarray, index: int, run_seed: int,
               workdir: str) -> dict:
  seed = seed_for(index, run_seed)
  data, mutator, desc = af.mutate(seeds[seed], index, run_seed)
  path = os.path.join(workdir, "mutant.tflite")
  with open(path, "wb") as f:
    f.write(data)
  record = {"index": index, "seed": seed, "mutator": mutator, "desc": desc}
  record.update(af.run_action(lambda: convert_one(path, seed, calibration, workdir),
                              workdir))
  if record["outcome"] in af.FAILURES:  # Kept for reproduction.
    keep = os.path.join(workdir, f"finding_{index}_{seed}.tflite")
    os.replace(path, keep)
    record["file"] = keep
  return record


def worker(run_seed: int, indices, workdir: str, seeds_json: str, calibration: str,
           out) -> None:
  """Fork server: loads the seeds, the images and every library once (one conversion
  of each seed), then one forked child per mutant."""
  with open(seeds_json) as f:
    paths = json.load(f)
  seeds = {}
  for name, p in paths.items():
    with open(p, "rb") as f:
      seeds[name] = f.read()
  images = np.load(calibration)
  for name, p in paths.items():
    outcome, msg = convert_one(p, name, images, workdir)
    if outcome != "ok":
      raise RuntimeError(f"seed {name} does not convert: {msg}")
  for index in indices:
    out.write(json.dumps(run_mutant(seeds, images, index, run_seed, workdir)) + "\n")
    out.flush()


def fuzz(mutants: int, workers: int = 2, run_seed: int = 0, start: int = 0,
         workdir: str | None = None, progress=None) -> dict:
  workdir = workdir or tempfile.mkdtemp(prefix="forge_convert_fuzz_")
  os.makedirs(workdir, exist_ok=True)
  seeds = os.path.join(workdir, "seeds.json")
  paths = seed_paths(workdir)
  with open(seeds, "w") as f:
    json.dump(paths, f)
  summary = af.drive("forge_tflm.testing.convert_fuzz", mutants, workers, run_seed, start,
                     workdir, progress,
                     [f"--seeds={seeds}", f"--calibration={calibration_file(workdir)}"])
  summary["seeds"] = {k: hashlib.sha256(open(p, "rb").read()).hexdigest()[:16]
                      for k, p in paths.items()}
  return summary


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--worker", action="store_true")
  p.add_argument("--run_seed", type=int, default=0)
  p.add_argument("--start", type=int, default=0)
  p.add_argument("--stop", type=int, default=0)
  p.add_argument("--step", type=int, default=1)
  p.add_argument("--workdir", default=None)
  p.add_argument("--seeds", default=None)
  p.add_argument("--calibration", default=None)
  p.add_argument("--mutants", type=int, default=1000)
  p.add_argument("--workers", type=int, default=2)
  p.add_argument("--load", nargs="*", default=None,
                 help="convert these files, each in a child; one JSON record per line")
  p.add_argument("--seed", default="resnet20", choices=SEED_NAMES,
                 help="with --load: whose options (input contract)")
  args = p.parse_args(argv)
  if args.worker:
    worker(args.run_seed, range(args.start, args.stop, args.step), args.workdir,
           args.seeds, args.calibration, sys.stdout)
    return 0
  if args.load is not None:
    workdir = tempfile.mkdtemp(prefix="forge_convert_load_")
    images = np.load(calibration_file(workdir))
    for path in args.load:
      rec = af.run_action(lambda: convert_one(path, args.seed, images, workdir), workdir)
      print(json.dumps(dict(rec, path=path)), flush=True)
    return 0
  return af.campaign(fuzz, args, FAILURES)


if __name__ == "__main__":
  sys.exit(main())
