"""Mutation fuzz of `convert`'s int8 door in CI (issue 53): forge_tflm/testing/convert_fuzz.py.

2,000 mutants of the plain int8 ResNet-20 and MLPerf Tiny's int8 ResNet-8 through
converter.pipeline.convert, each in its own forked child: no abort, segfault, hang,
traceback, multi-line message, partial output set or artifact the evaluator refuses.
benchmarks/fuzz_convert.py runs 50,000 (benchmarks/results/fuzz_convert.txt).
"""

import os

import pytest

from forge_tflm.testing import artifact_fuzz as af
from forge_tflm.testing import convert_fuzz as cf
from tests.conftest import fuzz_slice

MUTANTS = fuzz_slice(2_000)


def _describe(records):
  return "\n".join(f"#{r['index']} {r['seed']}/{r['mutator']}: {r['desc'][:200]}"
                   f" -> {r['outcome']}: {r['message'][:300]} {r.get('file', '')}"
                   f"\n{r.get('stderr', '')[-500:]}" for r in records[:20])


def test_fuzz_convert_no_crash_hang_traceback_or_partial_output(tmp_path):
  missing = [p for p in (cf.MLPERF, cf.DATA_DIR) if not os.path.exists(p)]
  if missing:
    pytest.skip(f"needs {', '.join(missing)}")
  summary = cf.fuzz(MUTANTS, workers=2, run_seed=0, workdir=str(tmp_path))
  assert summary["worker_exit_codes"] == [0, 0], summary
  assert summary["mutants"] == MUTANTS, summary
  counts = summary["counts"]
  assert not summary["findings"], (
      f"{len(summary['findings'])} mutants crashed, hung or raised ({counts}); reproduce"
      " with python -m forge_tflm.testing.convert_fuzz --load FILE --seed=SEED:\n"
      + _describe(summary["findings"]))
  assert set(counts) <= {"ok", "rejected"}, counts
  # Both doors are exercised: mutants refused and mutants converted, from both seeds.
  assert counts.get("rejected", 0) > MUTANTS // 4 and counts.get("ok", 0) > MUTANTS // 20
  assert set(summary["by_seed"]) == set(cf.SEED_NAMES)
  assert set(summary["by_mutator"]) == set(af.MUTATORS)
  assert summary["rejected_by"].get("validator", 0) > MUTANTS // 10, summary["rejected_by"]
