"""Mutation fuzz of sites files in CI (issue 53): 2,000 mutants of `convert
--sites=@FILE` (forge_tflm/testing/sites_fuzz.py) through parse_sites and select_sites.
Each is refused in one line or accepted as exactly the names the file lists, each a
site of the model, within a CPU second; benchmarks/fuzz_sites_resume.py runs 10,000
and more (benchmarks/results/fuzz_sites_resume.txt)."""

import json

from forge_tflm.testing import sites_fuzz as sf
from tests.conftest import fuzz_slice

MUTANTS = fuzz_slice(2_000)


def test_the_seeds_pass_and_the_oracle_sees_a_foreign_name(tmp_path):
  found = sf.model_sites()
  path = str(tmp_path / "s.json")
  for doc in sf.seeds(found).values():
    assert sf.check(path, json.dumps(doc).encode(), found) == ("ok", "")
  names = [s.name for s in found]
  assert sf.contradiction(json.dumps(names + ["x"]).encode(), tuple(names + ["x"]),
                           found, found)
  assert sf.contradiction(json.dumps(names).encode(), tuple(names[:-1]), found, found)


def test_fuzz_sites_files():
  summary = sf.fuzz(MUTANTS)
  counts = summary["counts"]
  assert sum(counts.values()) == MUTANTS
  assert not summary["findings"], "\n".join(
      f"#{r['index']} {r['seed']}/{r['mutator']}: {r['desc']} -> {r['outcome']}:"
      f" {r['message'][:300]}" for r in summary["findings"][:10])
  assert set(summary["by_mutator"]) == set(sf.MUTATORS), summary["by_mutator"]
  # The mix stays meaningful: most mutants are refused, some still pass.
  assert counts.get("rejected", 0) > MUTANTS // 2 and counts.get("ok", 0) > MUTANTS // 20
