"""select pass: all, none, names (model order kept), unknown names."""

import numpy as np
import pytest

from forge_tflm.converter.select import select_sites
from forge_tflm.converter.sites import ConversionError
from tests.converter import handmade

_FOUND = [handmade.site_for(np.ones((2, 1, 1, 2)), n) for n in ("a", "b", "c")]


def test_all_none_and_names_in_model_order():
  assert select_sites(_FOUND, "all") == _FOUND
  assert select_sites(_FOUND, "none") == []
  assert [s.name for s in select_sites(_FOUND, ("c", "a"))] == ["a", "c"]


def test_unknown_names_listed_with_the_model_sites():
  with pytest.raises(ConversionError, match=r"unknown site\(s\) x, y; .* a, b, c"):
    select_sites(_FOUND, ("a", "x", "y"))
