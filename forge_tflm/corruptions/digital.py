"""Digital corruptions: brightness, contrast, elastic_transform, pixelate,
jpeg_compression, saturate (held out)."""

from __future__ import annotations

import io

import cv2
import numpy as np
import scipy.ndimage
from PIL import Image

from forge_tflm.corruptions.common import to_unit, unit_to_uint8


def brightness(images: np.ndarray, shift: float, rngs) -> np.ndarray:
  """Adds `shift` to the HSV value (clipped at 1), keeping hue and saturation.

  With hue and saturation fixed, HSV->RGB is linear in the value, so the
  original's rgb2hsv / hsv2rgb round trip equals scaling RGB by new/old
  value; black pixels (value 0, saturation 0) become gray `shift`.
  """
  del rngs  # Deterministic.
  x = to_unit(images)
  value = x.max(axis=-1, keepdims=True)
  new_value = np.minimum(value + shift, 1.0)
  scale = np.divide(new_value, value, out=np.zeros_like(value), where=value > 0)
  x = np.where(value > 0, x * scale, new_value)
  return unit_to_uint8(x)


def contrast(images: np.ndarray, factor: float, rngs) -> np.ndarray:
  """Scales each image's deviation from its per-channel mean."""
  del rngs  # Deterministic.
  x = to_unit(images)
  means = x.mean(axis=(1, 2), keepdims=True)
  return unit_to_uint8((x - means) * factor + means)


def elastic_transform(images: np.ndarray, c, rngs) -> np.ndarray:
  """Random affine warp, then a smooth random displacement field.

  Per image, as the original: three anchor points jittered by up to
  `affine_jitter` pixels define a cv2.warpAffine (bilinear, reflect-101
  border); two fields of uniform noise smoothed by a Gaussian (reflect,
  truncate 3) and scaled by `scale` displace the sampling grid, sampled with
  scipy's map_coordinates (order 1, reflect).
  """
  scale, smoothing, affine_jitter = c
  n, h, w, _ = images.shape
  x = to_unit(images, np.float32)
  centre = np.float32((h, w)) // 2
  third = min(h, w) // 3
  anchors = np.float32([centre + third,
                        [centre[0] + third, centre[1] - third],
                        centre - third])
  jitters, fields = [], []
  for rng in rngs:
    jitters.append(rng.uniform(-affine_jitter, affine_jitter, size=anchors.shape))
    fields.append(rng.uniform(-1, 1, size=(2, h, w)))
  fields = np.stack(fields)  # [N, 2 (dx, dy), H, W]
  smoothed = scipy.ndimage.gaussian_filter(fields, (0, 0, smoothing, smoothing),
                                           mode="reflect", truncate=3)
  displacement = (smoothed * scale).astype(np.float32)
  grid_y, grid_x, grid_c = np.meshgrid(np.arange(h), np.arange(w), np.arange(3),
                                       indexing="ij")
  out = np.empty_like(x)
  for i in range(n):
    moved = anchors + jitters[i].astype(np.float32)
    warped = cv2.warpAffine(x[i], cv2.getAffineTransform(anchors, moved), (w, h),
                            borderMode=cv2.BORDER_REFLECT_101)
    coords = (grid_y + displacement[i, 1][..., None],
              grid_x + displacement[i, 0][..., None], grid_c)
    out[i] = scipy.ndimage.map_coordinates(
        warped, [a.reshape(-1) for a in coords], order=1,
        mode="reflect").reshape(h, w, 3)
  return unit_to_uint8(out)


def pixelate(images: np.ndarray, factor: float, rngs) -> np.ndarray:
  """PIL box downscale to int(size * factor), then box upscale back."""
  del rngs  # Deterministic.
  n, h, w, _ = images.shape
  small = (int(w * factor), int(h * factor))
  out = np.empty_like(images)
  for i in range(n):
    img = Image.fromarray(images[i]).resize(small, Image.BOX)
    out[i] = np.asarray(img.resize((w, h), Image.BOX))
  return out


def jpeg_compression(images: np.ndarray, quality: int, rngs) -> np.ndarray:
  """PIL JPEG encode at `quality` and decode."""
  del rngs  # Deterministic.
  out = np.empty_like(images)
  for i in range(len(images)):
    buffer = io.BytesIO()
    Image.fromarray(images[i]).save(buffer, "JPEG", quality=int(quality))
    buffer.seek(0)
    with Image.open(buffer) as img:
      out[i] = np.asarray(img.convert("RGB"))
  return out


def rgb_to_hsv(x: np.ndarray) -> np.ndarray:
  """skimage.color.rgb2hsv on [..., 3] floats in [0, 1] (gray pixels get hue 0)."""
  value = x.max(-1)
  delta = value - x.min(-1)
  safe = np.where(delta > 0, delta, 1.0)
  r, g, b = x[..., 0], x[..., 1], x[..., 2]
  # skimage assigns red, then green, then blue where each is the max: blue wins ties.
  hue = np.where(b == value, 4.0 + (r - g) / safe,
                 np.where(g == value, 2.0 + (b - r) / safe, (g - b) / safe))
  hue = np.where(delta > 0, (hue / 6.0) % 1.0, 0.0)
  saturation = np.divide(delta, value, out=np.zeros_like(value), where=value > 0)
  return np.stack([hue, saturation, value], -1)


def hsv_to_rgb(hsv: np.ndarray) -> np.ndarray:
  """skimage.color.hsv2rgb."""
  h, s, v = hsv[..., 0], hsv[..., 1], hsv[..., 2]
  sector = np.floor(h * 6.0)
  f = h * 6.0 - sector
  p, q, t = v * (1 - s), v * (1 - f * s), v * (1 - (1 - f) * s)
  choices = np.stack([np.stack(c, -1) for c in ((v, t, p), (q, v, p), (p, v, t),
                                                 (p, q, v), (t, p, v), (v, p, q))])
  index = (sector.astype(np.int64) % 6)[None, ..., None]
  return np.take_along_axis(choices, index, 0)[0]


def saturate(images: np.ndarray, c, rngs) -> np.ndarray:
  """Scales and offsets the HSV saturation (clipped to [0, 1])."""
  del rngs  # Deterministic.
  factor, offset = c
  hsv = rgb_to_hsv(to_unit(images))
  hsv[..., 1] = np.clip(hsv[..., 1] * factor + offset, 0.0, 1.0)
  return unit_to_uint8(hsv_to_rgb(hsv))
