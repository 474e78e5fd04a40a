"""calibration pass: images from any source, int8 ranges, pre-activation params."""

import numpy as np
import pytest

from forge_tflm import tflite_graph as tg
from forge_tflm.converter import calibration as calib
from forge_tflm.converter.sites import ConversionError
from forge_tflm.data.imageset import ImageSet


def test_calibration_images_from_imageset_array_and_iterable():
  images = np.random.default_rng(0).integers(0, 256, (5, 4, 4, 3)).astype(np.uint8)
  labelled = ImageSet(images, np.zeros(5, np.int64), ("x",), "five images")
  for source in (labelled, images, iter(list(images)), (im for im in images)):
    got, description = calib.calibration_images(source)
    np.testing.assert_array_equal(got, images)
    assert description
  assert calib.calibration_images(labelled)[1] == "five images"


@pytest.mark.parametrize("bad,message", [
    (None, "no calibration images"), ([], "no calibration images"),
    (np.zeros((2, 4, 4, 3), np.float32), "uint8"),
    ([np.zeros((4, 4, 3), np.uint8), np.zeros((5, 4, 3), np.uint8)], "differ in shape"),
])
def test_bad_calibration_images_are_one_line_errors(bad, message):
  with pytest.raises(ConversionError, match=message):
    calib.calibration_images(bad)


def test_int8_params_hold_zero_and_the_range():
  scale, zp = tg.int8_params(-1.0, 3.0)
  assert scale == pytest.approx(4.0 / 255) and zp == round(-128 + 1 / scale)
  assert tg.int8_params(0.5, 2.0) == tg.int8_params(0.0, 2.0)  # Widened to hold 0.
  scale, zp = tg.int8_params(0.0, 0.0)  # Degenerate: a tiny positive scale.
  assert scale > 0 and -128 <= zp <= 127


def test_preact_params_minmax_and_percentile():
  values = np.concatenate([np.linspace(-1, 1, 9999), [50.0]]).astype(np.float32)
  stats = calib.range_stats({"s": [values]})["s"]
  assert (stats.low, stats.high, stats.count) == (-1.0, 50.0, 10000)
  scale, zp, saturated = calib.preact_params(stats, "minmax")
  assert (scale, zp) == tg.int8_params(-1.0, 50.0) and saturated == 0.0
  scale, zp, saturated = calib.preact_params(stats, "percentile:99.9")
  assert scale < 51 / 255 and saturated >= 1 / 10000  # The outlier is clipped.
