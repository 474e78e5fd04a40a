"""Corruptions: shapes, determinism, batching, caching, and agreement of the
vectorized pieces with straightforward per-image reference code."""

import colorsys
import math
import os

import numpy as np
import pytest
import scipy.ndimage

from forge_tflm import corruptions
from forge_tflm.corruptions import (ALL_CORRUPTIONS, CORRUPTIONS, DETERMINISTIC,
                                    HELD_OUT_CORRUPTIONS, corrupt, corrupt_cached,
                                    resolve_param_set)
from forge_tflm.corruptions import blur, cache, digital, filters, weather
from forge_tflm.corruptions.common import image_rngs

PARAM_SETS = (("cifar", 32), ("tinyimagenet", 64))


def _frost_textures_present() -> bool:
  try:
    directory = weather.frost_dir()
  except FileNotFoundError:
    return False
  return all(os.path.exists(os.path.join(directory, f)) for f in weather.FROST_FILES)


def skip_without_frost(name):
  if name == "frost" and not _frost_textures_present():
    pytest.skip("frost needs its textures: pip install --no-deps imagecorruptions==1.1.2"
                f" or set {weather.FROST_DIR_ENV}")


def _images(n, size, seed=0):
  """Smooth colour gradients plus noise: some structure for blurs to act on."""
  rng = np.random.default_rng(seed)
  yy, xx = np.mgrid[0:size, 0:size] / size
  base = np.stack([yy, xx, (yy + xx) / 2], axis=-1) * 200
  noise = rng.normal(0, 25, size=(n, size, size, 3))
  return np.clip(base + noise + rng.uniform(0, 40, (n, 1, 1, 3)), 0, 255).astype(np.uint8)


def test_public_names():
  assert CORRUPTIONS == (
      "gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "glass_blur",
      "motion_blur", "zoom_blur", "snow", "frost", "fog", "brightness", "contrast",
      "elastic_transform", "pixelate", "jpeg_compression")
  assert set(corruptions.PARAMETER_SETS) == {"cifar", "tinyimagenet"}
  for table in corruptions.PARAMETER_SETS.values():
    for name in CORRUPTIONS:
      assert len(table[name]) == 5, name


@pytest.mark.parametrize("severity", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("name", CORRUPTIONS)
@pytest.mark.parametrize("params,size", PARAM_SETS)
def test_shape_dtype_and_determinism(params, size, name, severity):
  skip_without_frost(name)
  images = _images(3, size)
  out = corrupt(images, name, severity, seed=7, params=params)
  assert out.shape == images.shape and out.dtype == np.uint8
  np.testing.assert_array_equal(out, corrupt(images, name, severity, seed=7, params=params))
  other_seed = corrupt(images, name, severity, seed=8, params=params)
  if name in DETERMINISTIC:
    np.testing.assert_array_equal(out, other_seed)
  else:
    assert not np.array_equal(out, other_seed)
  # Inputs are left alone.
  np.testing.assert_array_equal(images, _images(3, size))


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_severity5_changes_images(name):
  skip_without_frost(name)
  images = _images(4, 32)
  assert np.abs(corrupt(images, name, 5).astype(int) - images).mean() > 0.5


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_image_result_does_not_depend_on_batching(name):
  skip_without_frost(name)
  images = _images(6, 32)
  whole = corrupt(images, name, 3, seed=3)
  part = corrupt(images[2:5], name, 3, seed=3, first_index=2)
  np.testing.assert_array_equal(whole[2:5], part)


@pytest.mark.parametrize("severity", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("name", HELD_OUT_CORRUPTIONS)
def test_held_out_shape_determinism_and_batching(name, severity):
  assert ALL_CORRUPTIONS == CORRUPTIONS + HELD_OUT_CORRUPTIONS
  images = _images(6, 32)
  out = corrupt(images, name, severity, seed=7)
  assert out.shape == images.shape and out.dtype == np.uint8
  np.testing.assert_array_equal(out, corrupt(images, name, severity, seed=7))
  np.testing.assert_array_equal(out[2:5], corrupt(images[2:5], name, severity, seed=7,
                                                  first_index=2))
  other_seed = corrupt(images, name, severity, seed=8)
  assert np.array_equal(out, other_seed) == (name in DETERMINISTIC)
  if severity == 5:
    assert np.abs(out.astype(int) - images).mean() > 0.5


def test_speckle_noise_is_multiplicative():
  images = _images(2, 32)
  images[0, :4] = 0
  out = corrupt(images, "speckle_noise", 5, seed=1)
  np.testing.assert_array_equal(out[0, :4], 0)  # black stays black
  x = images[1].astype(float) / 255
  ratio = (out[1].astype(float) / 255 - x)[x > 0.2] / x[x > 0.2]
  assert abs(ratio.std() - 0.2) < 0.03  # severity 5: std 0.2 of the pixel value


def test_gaussian_blur_is_scipy_gaussian_per_channel():
  images = _images(2, 32)
  out = corrupt(images, "gaussian_blur", 5)
  for image, result in zip(images, out):
    for ch in range(3):
      expected = scipy.ndimage.gaussian_filter(image[..., ch] / 255., 1.0, mode="nearest")
      np.testing.assert_array_equal(result[..., ch], (np.clip(expected, 0, 1) * 255).astype(np.uint8))


@pytest.mark.parametrize("severity", [1, 3, 5])
def test_saturate_matches_colorsys_round_trip(severity):
  images = _images(2, 8)
  images[0, 0, 0] = 0
  images[0, 0, 1] = (128, 128, 128)  # gray: hue 0, saturation 0 -> tinted red by +0.1
  images[0, 0, 2] = (200, 200, 10)  # red and green tie for the max
  factor, offset = corruptions.PARAMETER_SETS["cifar"]["saturate"][severity - 1]
  out = corrupt(images, "saturate", severity, params="cifar")
  for image, result in zip(images, out):
    for pixel, got in zip(image.reshape(-1, 3), result.reshape(-1, 3)):
      hue, sat, val = colorsys.rgb_to_hsv(*(pixel / 255.))
      expected = colorsys.hsv_to_rgb(hue, min(max(sat * factor + offset, 0), 1), val)
      assert np.abs(got.astype(int) - (np.clip(expected, 0, 1) * 255).astype(int)).max() <= 1


@pytest.mark.parametrize("severity", [1, 2, 3, 4, 5])
def test_spatter_only_adds_water_or_mud(severity):
  images = _images(8, 32)
  out = corrupt(images, "spatter", severity, seed=2).astype(int)
  changed = (out != images).any(-1)
  assert changed.any()
  if severity <= 3:  # water: x + m * turquoise, never darker
    assert (out >= images.astype(int) - 1).all()
  else:  # mud: a blend towards (63, 42, 20) where the layer is dense
    x = images.astype(float)[changed]
    away = x - [63, 42, 20]
    t = ((x - out[changed]) * away).sum(-1) / np.maximum((away ** 2).sum(-1), 1e-9)
    assert t.min() > -0.02 and t.max() < 1.02
    assert np.abs(x - t[:, None] * away - out[changed]).max() <= 1.5


def test_parameter_set_follows_image_size():
  assert resolve_param_set(_images(1, 32), None) == "cifar"
  assert resolve_param_set(_images(1, 64), None) == "tinyimagenet"
  assert resolve_param_set(_images(1, 64), "cifar") == "cifar"
  with pytest.raises(ValueError, match="no parameter set for 48x48"):
    corrupt(_images(1, 48), "contrast", 1)
  images = _images(2, 32)
  assert not np.array_equal(corrupt(images, "contrast", 5),
                            corrupt(images, "contrast", 5, params="tinyimagenet"))


def test_bad_arguments():
  images = _images(1, 32)
  with pytest.raises(ValueError, match="severity"):
    corrupt(images, "fog", 6)
  with pytest.raises(ValueError, match="unknown corruption"):
    corrupt(images, "rain", 1)
  with pytest.raises(ValueError, match="speckle_noise has no 'tinyimagenet' parameters"):
    corrupt(_images(1, 64), "speckle_noise", 1)
  with pytest.raises(ValueError, match="unknown parameter set"):
    corrupt(images, "fog", 1, params="imagenet")
  with pytest.raises(ValueError, match="uint8"):
    corrupt(images.astype(np.float32), "fog", 1)
  with pytest.raises(ValueError, match="uint8"):
    corrupt(images[0], "fog", 1)
  with pytest.raises(ValueError, match=">= 0"):
    corrupt(images, "fog", 1, seed=-1)


def test_empty_batch():
  empty = np.zeros((0, 32, 32, 3), np.uint8)
  assert corrupt(empty, "fog", 3).shape == empty.shape


def test_missing_frost_textures_are_reported(tmp_path, monkeypatch):
  weather.frost_textures.cache_clear()
  monkeypatch.setenv(weather.FROST_DIR_ENV, str(tmp_path))
  try:
    with pytest.raises(FileNotFoundError, match="frost1.png"):
      corrupt(_images(1, 32), "frost", 1)
  finally:
    weather.frost_textures.cache_clear()


# Cache.

def test_cache_computes_once_then_loads(tmp_path, monkeypatch):
  images = _images(5, 32)
  expected = corrupt(images, "fog", 4, seed=2)
  first = corrupt_cached(images, "fog", 4, seed=2, cache_dir=str(tmp_path))
  np.testing.assert_array_equal(first, expected)
  files = os.listdir(tmp_path)
  assert len(files) == 1 and files[0].endswith(".npy")

  def fail(*args, **kwargs):
    raise AssertionError("recomputed instead of loading the cache")
  monkeypatch.setattr(cache, "corrupt", fail)
  np.testing.assert_array_equal(
      corrupt_cached(images, "fog", 4, seed=2, cache_dir=str(tmp_path)), expected)


def test_cache_key_covers_inputs_and_arguments(tmp_path):
  images = _images(3, 32)
  changed = images.copy()
  changed[0, 0, 0, 0] ^= 1
  for args in [(images, "fog", 4, 2), (images, "fog", 4, 3), (images, "fog", 5, 2),
               (images, "snow", 4, 2), (changed, "fog", 4, 2)]:
    corrupt_cached(*args[:3], seed=args[3], cache_dir=str(tmp_path))
  corrupt_cached(images, "fog", 4, seed=2, params="tinyimagenet", cache_dir=str(tmp_path))
  corrupt_cached(images, "fog", 4, seed=2, first_index=1, cache_dir=str(tmp_path))
  assert len(os.listdir(tmp_path)) == 7


def test_damaged_cache_entry_is_rebuilt(tmp_path):
  images = _images(2, 32)
  corrupt_cached(images, "contrast", 2, cache_dir=str(tmp_path))
  (path,) = [os.path.join(tmp_path, f) for f in os.listdir(tmp_path)]
  with open(path, "wb") as f:
    f.write(b"not an npy file")
  np.testing.assert_array_equal(corrupt_cached(images, "contrast", 2, cache_dir=str(tmp_path)),
                                corrupt(images, "contrast", 2))
  np.testing.assert_array_equal(np.load(path), corrupt(images, "contrast", 2))


def test_default_cache_dir_follows_environment(tmp_path, monkeypatch):
  monkeypatch.setenv("FORGE_TFLM_CACHE", str(tmp_path))
  corrupt_cached(_images(1, 32), "brightness", 1)
  assert len(os.listdir(tmp_path / "corruptions")) == 1


# Vectorized pieces against plain per-image versions of the original steps.

def _reference_shuffle(image, deltas, max_delta):
  """The original's loop, including its assignment-through-views 'swap'."""
  x = image.copy()
  h, w, _ = x.shape
  for it_deltas in deltas:
    step = 0
    for row in range(h - max_delta, max_delta, -1):
      for col in range(w - max_delta, max_delta, -1):
        dx, dy = it_deltas[step]
        step += 1
        x[row, col], x[row + dy, col + dx] = x[row + dy, col + dx], x[row, col]
  return x


@pytest.mark.parametrize("max_delta,iterations,size",
                         [(1, 2, 32), (2, 2, 16), (2, 1, 64), (3, 2, 20)])
def test_pixel_shuffle_matches_sequential_loop(max_delta, iterations, size):
  images = _images(3, size)
  out = blur.shuffle_pixels(images.copy(), max_delta, iterations,
                            image_rngs(5, "t", 0, 3))
  steps = (size - 2 * max_delta) ** 2
  for image, result, rng in zip(images, out, image_rngs(5, "t", 0, 3)):
    deltas = rng.integers(-max_delta, max_delta, size=(iterations, steps, 2))
    np.testing.assert_array_equal(result, _reference_shuffle(image, deltas, max_delta))


def _reference_motion_blur(image, radius, sigma, angle):
  """ImageMagick's MotionBlurImage pixel by pixel (edge virtual pixels)."""
  width = int(2 * math.ceil(radius) + 1)
  weights = np.exp(-np.arange(width) ** 2 / (2 * sigma ** 2))
  weights /= weights.sum()
  px, py = width * math.sin(math.radians(angle)), width * math.cos(math.radians(angle))
  offsets = [(math.ceil(i * py / math.hypot(px, py) - 0.5),
              math.ceil(i * px / math.hypot(px, py) - 0.5)) for i in range(width)]
  h, w, _ = image.shape
  out = np.zeros(image.shape)
  for y in range(h):
    for x in range(w):
      for weight, (ox, oy) in zip(weights, offsets):
        out[y, x] += weight * image[min(max(y + oy, 0), h - 1), min(max(x + ox, 0), w - 1)]
  return out


def test_motion_blur_matches_imagemagick_definition():
  images = _images(5, 12).astype(np.float64)
  angles = [0.0, 45.0, -45.0, -90.0, 17.3]
  out = filters.motion_blur(images, 4, 2.0, angles)
  for image, angle, result in zip(images, angles, out):
    np.testing.assert_allclose(result, _reference_motion_blur(image, 4, 2.0, angle),
                               rtol=1e-6, atol=1e-4)


def _reference_clipped_zoom(image, factor):
  h = image.shape[0]
  crop = int(np.ceil(h / factor))
  top = (h - crop) // 2
  zoomed = scipy.ndimage.zoom(image[top:top + crop, top:top + crop], (factor, factor, 1),
                              order=1)
  trim = (zoomed.shape[0] - h) // 2
  return zoomed[trim:trim + h, trim:trim + h]


@pytest.mark.parametrize("size", [32, 64])
def test_zoom_blur_matches_per_factor_zooms(size):
  images = _images(2, size)
  factors = np.arange(1, 1.26, 0.01)
  out = blur.zoom_blur(images, 1.26, None)
  for image, result in zip(images, out):
    x = (image / 255.).astype(np.float32)
    total = x + sum(_reference_clipped_zoom(x, f) for f in factors)
    expected = (np.clip(total / (len(factors) + 1), 0, 1) * 255).astype(np.uint8)
    assert np.abs(result.astype(int) - expected).max() <= 1
    assert (result != expected).mean() < 0.01


def test_brightness_matches_hsv_round_trip():
  images = _images(2, 8)
  images[0, 0, 0] = 0  # black: value 0, saturation 0
  images[0, 0, 1] = (255, 255, 255)
  out = digital.brightness(images, 0.3, None)
  for image, result in zip(images, out):
    for pixel, got in zip(image.reshape(-1, 3), result.reshape(-1, 3)):
      hue, sat, val = colorsys.rgb_to_hsv(*(pixel / 255.))
      expected = np.array(colorsys.hsv_to_rgb(hue, sat, min(val + 0.3, 1.0)))
      assert np.abs(got.astype(int) - (np.clip(expected, 0, 1) * 255).astype(int)).max() <= 1


def test_plasma_fractal_is_normalized_and_per_image():
  rngs = image_rngs(0, "plasma", 0, 3)
  maps = weather.plasma_fractal(32, 2.0, rngs)
  assert maps.shape == (3, 32, 32)
  np.testing.assert_allclose(maps.min(axis=(1, 2)), 0)
  np.testing.assert_allclose(maps.max(axis=(1, 2)), 1)
  alone = weather.plasma_fractal(32, 2.0, image_rngs(0, "plasma", 1, 1))
  np.testing.assert_array_equal(maps[1], alone[0])


def test_defocus_kernel_is_normalized_disk():
  kernel = filters.disk_kernel(1.5, 0.1)
  assert kernel.shape[0] == kernel.shape[1] and kernel.shape[0] % 2 == 1
  np.testing.assert_allclose(kernel.sum(), 1, rtol=1e-5)
  np.testing.assert_allclose(kernel, kernel.T, atol=1e-7)
