"""match pass: each site's conv is found by its folded weights, never by order."""

import numpy as np
import pytest

from forge_tflm.converter.match import match_sites
from forge_tflm.converter.sites import ConversionError
from tests.converter import handmade


def test_sites_find_their_convs_in_any_order():
  model, w = handmade.two_convs(channels=(4, 4))
  # Float noise well inside int8 rounding, as BN folding in float32 leaves.
  noisy = [k * (1 + 1e-4) for k in w]
  sites = [handmade.site_for(noisy[1], "second"), handmade.site_for(noisy[0], "first")]
  assert match_sites(model, sites) == {"second": 1, "first": 0}


def test_weights_nobody_has_are_an_error():
  model, w = handmade.two_convs()
  with pytest.raises(ConversionError, match="no conv op .* has its folded"):
    match_sites(model, [handmade.site_for(w[0] + 0.05, "stranger")])


def test_two_sites_on_one_conv_are_an_error():
  model, w = handmade.two_convs()
  with pytest.raises(ConversionError, match="match the same conv"):
    match_sites(model, [handmade.site_for(w[0], "a"), handmade.site_for(w[0], "b")])


def test_identical_convs_are_ambiguous():
  model, w = handmade.two_convs(channels=(2, 2), cin=2)
  sg = model.subgraphs[0]
  # Give conv 1 conv 0's weights (same shape: 2 -> 2 channels).
  sg.tensors[sg.operators[1].inputs[1]].buffer = sg.tensors[sg.operators[0].inputs[1]].buffer
  sg.tensors[sg.operators[1].inputs[1]].quantization = \
      sg.tensors[sg.operators[0].inputs[1]].quantization
  with pytest.raises(ConversionError, match="2 convs have the same folded"):
    match_sites(model, [handmade.site_for(np.asarray(w[0]), "a")])
