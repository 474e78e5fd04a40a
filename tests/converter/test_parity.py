"""converter/parity.py: the error measure and where a divergence is reported."""

import numpy as np
import pytest

from forge_tflm.converter import parity


def test_relative_error_is_relative_to_the_reference_range():
  want = np.array([[-2.0, 4.0]])
  assert parity.relative_error(want, want) == 0.0
  assert parity.relative_error(want + [[0.0, 0.04]], want) == pytest.approx(0.01)
  assert parity.relative_error(np.zeros((2, 2)), want) == float("inf")  # shape
  assert parity.relative_error(np.array([[np.nan, 4.0]]), want) == float("inf")


def _report(sites, output=1e-7):
  return parity.ParityReport(images=8, tolerance=1e-3, output_error=output,
                             float_top1_agreement=1.0, site_errors=tuple(sites),
                             int8_top1_agreement=0.9)


def test_divergence_names_the_first_site_in_graph_order():
  r = _report([("a", 1e-6), ("b", 0.5), ("c", 0.9)])
  assert r.divergence().startswith("first at site 'b' (BN output error 0.5")
  assert r.worst_site == ("c", 0.9)
  assert r.to_json()["float_vs_source"]["worst_site"] == "c"


def test_divergence_after_the_last_site_and_none():
  assert _report([("a", 1e-6)], output=0.2).divergence().startswith(
      "at the model output after the last site 'a'")
  assert _report([("a", 1e-6), ("b", float("inf"))]).divergence().startswith(
      "first at site 'b'")  # A site the float model lost (unmatched) counts too.
  assert _report([("a", 1e-6)]).divergence() is None
