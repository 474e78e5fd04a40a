"""Executors: results in unit order, identical whichever executor ran them."""

import os

import pytest

from forge_tflm import sweep


def square_with_pid(unit):
  return unit * unit, os.getpid()


def fail_on_three(unit):
  if unit == 3:
    raise ValueError("unit 3 is bad")
  return unit


def test_inline_and_processes_agree_and_keep_order():
  units = list(range(7))
  seen = []
  inline = sweep.make_executor("inline").map(square_with_pid, units,
                                             lambda i, r: seen.append(i))
  assert seen == units and [r[0] for r in inline] == [u * u for u in units]
  done = []
  procs = sweep.make_executor("processes", workers=2).map(
      square_with_pid, units, lambda i, r: done.append((i, r[0])))
  assert [r[0] for r in procs] == [r[0] for r in inline]
  assert sorted(done) == [(u, u * u) for u in units]
  assert os.getpid() not in {r[1] for r in procs}  # ran in workers


def test_worker_errors_reach_the_caller():
  with pytest.raises(ValueError, match="unit 3 is bad"):
    sweep.make_executor("processes", workers=2).map(fail_on_three, range(5))


def test_make_executor_validates():
  with pytest.raises(ValueError, match="executor must be one of"):
    sweep.make_executor("threads")
  with pytest.raises(ValueError, match="workers"):
    sweep.ProcessExecutor(workers=-1)
  assert sweep.make_executor("processes").workers == sweep.default_workers()
  assert sweep.make_executor("inline").map(square_with_pid, []) == []


def test_ray_executor_matches_inline():
  pytest.importorskip("ray")
  units = list(range(5))
  out = sweep.make_executor("ray", workers=2).map(square_with_pid, units)
  assert [r[0] for r in out] == [u * u for u in units]
