"""Executors for sweeps: many independent units, one interface, identical results.

An experiment is a list of units (model x corruption x ordering x setting), each a
small frozen value; a module-level function turns one unit into its result. The
executor only decides where that function runs:

  inline     in this process, one unit after the other;
  processes  local worker processes (default: one per core), spawned fresh;
  ray        Ray tasks, on a local Ray instance started for the sweep or on the
             cluster at `address` (for sweeps that outgrow one machine).

Results come back in unit order, whichever executor ran them, and a unit's result
depends only on the unit: units never share mutable state. Workers share generated
corruptions through the on-disk cache (corruptions.corrupt_cached: content-keyed,
written atomically); prepare() fills it once before the units run, so no worker
recomputes one.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing
import os
from typing import Callable, Sequence

from absl import logging

EXECUTORS = ("inline", "processes", "ray")


def default_workers() -> int:
  return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
      os.cpu_count() or 1)


class Executor:
  """Maps a picklable module-level function over units; results in unit order."""

  name = ""

  def map(self, fn: Callable, units: Sequence,
          on_result: Callable[[int, object], None] | None = None) -> list:
    """fn(unit) for every unit; on_result(i, result) is called (in this process) as
    unit i finishes, in completion order."""
    raise NotImplementedError


class InlineExecutor(Executor):
  name = "inline"
  workers = 1

  def map(self, fn, units, on_result=None):
    out = []
    for i, unit in enumerate(units):
      out.append(fn(unit))
      if on_result:
        on_result(i, out[-1])
    return out


@contextlib.contextmanager
def _single_threaded_children():
  """Each worker gets one core: BLAS / OpenMP pools in children are sized from
  these variables at import, and N workers x N threads only contend."""
  names = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
           "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")
  saved = {n: os.environ.get(n) for n in names}
  os.environ.update({n: "1" for n in names})
  try:
    yield
  finally:
    for n, v in saved.items():
      if v is None:
        os.environ.pop(n, None)
      else:
        os.environ[n] = v


class ProcessExecutor(Executor):
  """Local worker processes, spawned (not forked: a forked LiteRT or TensorFlow
  runtime is not safe to use)."""

  name = "processes"

  def __init__(self, workers: int | None = None):
    self.workers = workers or default_workers()
    if self.workers < 1:
      raise ValueError("workers must be >= 1")

  def map(self, fn, units, on_result=None):
    units = list(units)
    if not units:
      return []
    out = [None] * len(units)
    with _single_threaded_children(), concurrent.futures.ProcessPoolExecutor(
        max_workers=min(self.workers, len(units)),
        mp_context=multiprocessing.get_context("spawn")) as pool:
      futures = {pool.submit(fn, unit): i for i, unit in enumerate(units)}
      try:
        for future in concurrent.futures.as_completed(futures):
          i = futures[future]
          out[i] = future.result()
          if on_result:
            on_result(i, out[i])
      except BaseException:
        for f in futures:
          f.cancel()
        raise
    return out


class RayExecutor(Executor):
  """Ray tasks (one CPU each). With no address a local instance with `workers` CPUs
  is started for the map and shut down after it; with one, the cluster is joined
  (its workers need this package at the same version installed)."""

  name = "ray"

  def __init__(self, workers: int | None = None, address: str | None = None):
    try:
      import ray  # pylint: disable=import-outside-toplevel,unused-import
    except ImportError as e:
      raise ValueError("the ray executor needs Ray: pip install ray (see"
                       " requirements.txt for the tested version)") from e
    self.workers = workers or default_workers()
    self.address = address

  def map(self, fn, units, on_result=None):
    import ray  # pylint: disable=import-outside-toplevel

    units = list(units)
    if not units:
      return []
    started = not ray.is_initialized()
    if started:
      with _single_threaded_children():
        if self.address:
          ray.init(address=self.address, log_to_driver=False)
        else:
          ray.init(num_cpus=self.workers, include_dashboard=False, log_to_driver=False,
                   configure_logging=False)
    try:
      task = ray.remote(num_cpus=1, max_retries=0)(fn)
      refs = [task.remote(unit) for unit in units]
      index = {ref: i for i, ref in enumerate(refs)}
      out = [None] * len(units)
      pending = list(refs)
      while pending:
        done, pending = ray.wait(pending, num_returns=1)
        for ref in done:
          out[index[ref]] = ray.get(ref)
          if on_result:
            on_result(index[ref], out[index[ref]])
      return out
    finally:
      if started:
        ray.shutdown()


def make_executor(kind: str = "processes", workers: int | None = None,
                  address: str | None = None) -> Executor:
  """kind: one of EXECUTORS; workers: default all cores; address: Ray cluster."""
  if kind == "inline":
    return InlineExecutor()
  if kind == "processes":
    return ProcessExecutor(workers)
  if kind == "ray":
    return RayExecutor(workers, address)
  raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, not {kind!r}")


def run_units(executor: Executor, fn: Callable, units: Sequence, what: str = "units",
              progress: bool = True) -> list:
  """executor.map with a progress bar (stderr) and one log line at the end."""
  import time  # pylint: disable=import-outside-toplevel

  from tqdm import tqdm  # pylint: disable=import-outside-toplevel

  units = list(units)
  t0 = time.perf_counter()
  with tqdm(total=len(units), desc=what, unit="unit", disable=not progress,
            leave=False) as bar:
    out = executor.map(fn, units, on_result=lambda i, r: bar.update(1))
  logging.info("%d %s in %.1f s (%s executor, %d worker(s))", len(units), what,
               time.perf_counter() - t0, executor.name, getattr(executor, "workers", 1))
  return out
