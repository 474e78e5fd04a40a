"""Weather corruptions: snow, frost, fog, spatter (held out)."""

from __future__ import annotations

import functools
import importlib.util
import os

import cv2
import numpy as np

from forge_tflm.corruptions import filters
from forge_tflm.corruptions.common import (levels_to_uint8, round_to_uint8, to_unit,
                                           unit_to_uint8)

# The originals draw np.random.randint(5), so frost6.jpg is never used.
FROST_FILES = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg")
FROST_DIR_ENV = "FORGE_TFLM_FROST_DIR"


def snow(images: np.ndarray, c, rngs) -> np.ndarray:
  """Thresholded, zoomed noise streaked by motion blur, over a whitened image."""
  mean, std, zoom, threshold, blur_radius, blur_sigma, image_weight = c
  n, h, w, _ = images.shape
  layer = np.stack([rng.normal(loc=mean, scale=std, size=(h, w)) for rng in rngs])
  angles = [rng.uniform(-135, -45) for rng in rngs]
  layer = filters.apply_pixel_operator(
      layer[..., None], filters.zoom_operator(h, w, (float(zoom),), False))
  layer[layer < threshold] = 0
  # The original hands the layer to ImageMagick as an 8-bit PNG ...
  layer = unit_to_uint8(layer).astype(np.float32)
  # ... and reads back the 8-bit result.
  layer = round_to_uint8(filters.motion_blur(layer, blur_radius, blur_sigma, angles))
  layer = layer.astype(np.float32) / 255.0
  x = to_unit(images, np.float32)
  gray = (x @ np.array([0.299, 0.587, 0.114], dtype=np.float32))[..., None]
  x = image_weight * x + (1 - image_weight) * np.maximum(x, gray * 1.5 + 0.5)
  return unit_to_uint8(x + layer + layer[:, ::-1, ::-1])


def frost_dir() -> str:
  """Directory of the frost textures: $FORGE_TFLM_FROST_DIR or the ones
  bundled with the `imagecorruptions` package (the same files as the
  original repository's)."""
  if os.environ.get(FROST_DIR_ENV):
    return os.environ[FROST_DIR_ENV]
  # find_spec locates the package without importing it (its import needs
  # scikit-image, which is not a dependency here).
  spec = importlib.util.find_spec("imagecorruptions")
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError(
        "frost needs the frost textures: `pip install --no-deps"
        f" imagecorruptions==1.1.2`, or set {FROST_DIR_ENV} to a directory"
        f" holding {', '.join(FROST_FILES)}")
  return os.path.join(list(spec.submodule_search_locations)[0], "frost")


@functools.lru_cache(maxsize=4)
def frost_textures(scale: float) -> tuple[np.ndarray, ...]:
  """The textures as RGB uint8, resized by `scale` as the originals do."""
  textures = []
  for name in FROST_FILES:
    path = os.path.join(frost_dir(), name)
    bgr = cv2.imread(path)
    if bgr is None:
      raise FileNotFoundError(f"cannot read frost texture {path}")
    textures.append(np.ascontiguousarray(
        cv2.resize(bgr, (0, 0), fx=scale, fy=scale)[..., ::-1]))
  return tuple(textures)


def frost(images: np.ndarray, c, rngs) -> np.ndarray:
  """Blends a random crop of a random frost texture into each image."""
  image_weight, frost_weight, texture_scale = c
  n, h, w, _ = images.shape
  textures = frost_textures(float(texture_scale))
  crops = np.empty(images.shape, dtype=np.uint8)
  for i, rng in enumerate(rngs):
    texture = textures[rng.integers(len(textures))]
    top = rng.integers(0, texture.shape[0] - h)
    left = rng.integers(0, texture.shape[1] - w)
    crops[i] = texture[top:top + h, left:left + w]
  return levels_to_uint8(image_weight * images.astype(np.float64)
                         + frost_weight * crops.astype(np.float64))


def plasma_fractal(mapsize: int, wibble_decay: float, rngs) -> np.ndarray:
  """Diamond-square height maps in [0, 1], one [mapsize, mapsize] per generator.

  The originals' plasma_fractal, with a batch axis. It adds
  `wibble * uniform(-wibble, wibble)` noise at each level; each image draws
  all its levels' uniforms in one call.
  """
  if mapsize & (mapsize - 1):
    raise ValueError(f"mapsize must be a power of two, got {mapsize}")
  levels = []
  step = mapsize
  while step >= 2:
    levels.append((step, mapsize // step))
    step //= 2
  draws_per_image = sum(3 * cells * cells for _, cells in levels)
  uniforms = np.stack([rng.uniform(-1.0, 1.0, draws_per_image) for rng in rngs])
  n = len(rngs)
  heights = np.zeros((n, mapsize, mapsize))
  wibble = 100.0
  used = 0

  def noisy_mean(total):
    nonlocal used
    size = total[0].size
    noise = uniforms[:, used:used + size].reshape(total.shape)
    used += size
    return total / 4 + wibble * wibble * noise

  for step, _ in levels:
    half = step // 2
    # Squares: the centre of each square is the mean of its corners.
    corners = heights[:, 0::step, 0::step]
    square = corners + np.roll(corners, -1, axis=1)
    square += np.roll(square, -1, axis=2)
    heights[:, half::step, half::step] = noisy_mean(square)
    # Diamonds: each edge midpoint is the mean of its four neighbours.
    centres = heights[:, half::step, half::step]
    corners = heights[:, 0::step, 0::step]
    left = centres + np.roll(centres, 1, axis=1) + corners + np.roll(corners, -1, axis=2)
    heights[:, 0::step, half::step] = noisy_mean(left)
    top = centres + np.roll(centres, 1, axis=2) + corners + np.roll(corners, -1, axis=1)
    heights[:, half::step, 0::step] = noisy_mean(top)
    wibble /= wibble_decay
  heights -= heights.min(axis=(1, 2), keepdims=True)
  return heights / heights.max(axis=(1, 2), keepdims=True)


def fog(images: np.ndarray, c, rngs) -> np.ndarray:
  strength, wibble_decay = c
  n, h, w, _ = images.shape
  mapsize = 1 << int(np.ceil(np.log2(max(h, w, 2))))
  x = to_unit(images)
  max_value = x.max(axis=(1, 2, 3), keepdims=True)
  x += strength * plasma_fractal(mapsize, wibble_decay, rngs)[:, :h, :w, None]
  return unit_to_uint8(x * max_value / (max_value + strength))


_WATER = np.array([175, 238, 238], np.float32) / 255.0  # pale turquoise
_MUD = np.array([63, 42, 20], np.float32) / 255.0
_EMBOSS = np.array([[-2, -1, 0], [-1, 1, 1], [0, 1, 2]], np.float32)


def spatter(images: np.ndarray, c, rngs) -> np.ndarray:
  """Liquid drops: a thresholded blurred noise layer as embossed water (severities
  1-3) or as opaque mud (4-5).

  Differences from the original, both for inputs it mishandles: a layer with no drop
  leaves the image unchanged (the original divides by zero), and layer values above
  1 saturate at 255 before the edge detector (the original's uint8 cast wraps).
  """
  mean, std, sigma, threshold, strength, mud = c
  n, h, w, _ = images.shape
  layer = np.stack([rng.normal(loc=mean, scale=std, size=(h, w)) for rng in rngs])
  layer = filters.gaussian(layer.astype(np.float32), sigma)
  layer[layer < threshold] = 0
  x = to_unit(images, np.float32)
  if mud:
    m = filters.gaussian((layer > threshold).astype(np.float32), strength)
    m[m < 0.8] = 0
    m = m[..., None]
    return unit_to_uint8(x * (1 - m) + _MUD * m)
  out = np.empty_like(x)
  for i in range(n):
    liquid = np.clip(layer[i] * 255, 0, 255).astype(np.uint8)
    dist = 255 - cv2.Canny(liquid, 50, 150)
    dist = cv2.distanceTransform(dist, cv2.DIST_L2, 5)
    _, dist = cv2.threshold(dist, 20, 20, cv2.THRESH_TRUNC)
    dist = cv2.equalizeHist(cv2.blur(dist, (3, 3)).astype(np.uint8))
    dist = cv2.filter2D(dist, cv2.CV_8U, _EMBOSS)
    dist = cv2.blur(dist, (3, 3)).astype(np.float32)
    m = liquid.astype(np.float32) * dist
    peak = m.max()
    m = m / peak * strength if peak > 0 else m
    out[i] = x[i] + m[..., None] * _WATER
  return unit_to_uint8(out)
