"""Blur corruptions: defocus_blur, glass_blur, motion_blur, zoom_blur, gaussian_blur
(held out)."""

from __future__ import annotations

import numpy as np

from forge_tflm.corruptions import filters
from forge_tflm.corruptions.common import round_to_uint8, to_unit, unit_to_uint8


def defocus_blur(images: np.ndarray, c, rngs) -> np.ndarray:
  del rngs  # Deterministic.
  radius, alias_blur = c
  kernel = filters.disk_kernel(radius, alias_blur)
  return unit_to_uint8(filters.filter2d(to_unit(images, np.float32), kernel))


def glass_blur(images: np.ndarray, c, rngs) -> np.ndarray:
  """Gaussian blur, local pixel shuffling, Gaussian blur.

  The shuffle reproduces the original's loop exactly, including its quirk:
  `x[h, w], x[h2, w2] = x[h2, w2], x[h, w]` on numpy rows assigns through
  views, so it *copies* pixel (h2, w2) onto (h, w) rather than swapping.
  """
  sigma, max_delta, iterations = c
  x = unit_to_uint8(filters.gaussian(to_unit(images), sigma))
  x = shuffle_pixels(x, max_delta, iterations, rngs)
  return unit_to_uint8(filters.gaussian(to_unit(x), sigma))


def shuffle_pixels(images: np.ndarray, max_delta: int, iterations: int,
                   rngs) -> np.ndarray:
  """The original's sequential local pixel copy, exactly, for all images at once.

  Per iteration the original visits (h, w) for h, then w, from
  size-max_delta down to max_delta+1 and copies onto it the *current* pixel at
  (h+dy, w+dx), with dx, dy drawn from [-max_delta, max_delta). Which current
  value that is follows from the visiting order:
    * rows below (dy > 0) are finished, rows above are untouched, and in-row
      pixels at or left of w (dx <= 0) are untouched: so all of these read the
      state at the start of the row;
    * an in-row pixel to the right (dy == 0, dx > 0) was just overwritten:
      the target takes that pixel's new value, which may itself come from
      further right. Such chains are resolved by pointer jumping.
  So each row is one gather, vectorized over the batch. With max_delta == 1
  no read ever sees an overwritten pixel (dx, dy are -1 or 0), and a whole
  iteration is a single gather.
  """
  n, h, w, c = images.shape
  rows = np.arange(h - max_delta, max_delta, -1)
  cols = np.arange(w - max_delta, max_delta, -1)  # cols[j] = w - max_delta - j
  # (dx, dy) per visited pixel, as np.random.randint(-d, d, size=2) per visit.
  deltas = np.stack([rng.integers(-max_delta, max_delta,
                                  size=(iterations, len(rows) * len(cols), 2))
                     for rng in rngs]).reshape(n, iterations, len(rows), len(cols), 2)
  # Each RGB pixel packed into one uint32 and flat indices over the whole
  # batch: every gather moves scalars through a single index array.
  padded = np.zeros((n * h * w, 4), dtype=np.uint8)
  padded[:, :c] = images.reshape(n * h * w, c)
  pixels = padded.view(np.uint32).reshape(-1)
  image_starts = (np.arange(n) * (h * w))[:, None]
  order = np.arange(len(cols))
  for it in range(iterations):
    dx, dy = deltas[:, it, ..., 0], deltas[:, it, ..., 1]  # [N, rows, cols]
    sources = (rows[:, None] + dy) * w + cols + dx
    if max_delta == 1:
      targets = (rows[:, None] * w + cols).ravel()
      pixels[image_starts + targets] = pixels[image_starts + sources.reshape(n, -1)]
      continue
    for r, row in enumerate(rows):
      # Visit index of the in-row pixel read by a forward (dx > 0) read.
      read = order - dx[:, r]
      follows = (dy[:, r] == 0) & (dx[:, r] > 0) & (read >= 0)
      pointer = np.where(follows, read, order)
      while True:
        jumped = np.take_along_axis(pointer, pointer, axis=1)
        if np.array_equal(jumped, pointer):
          break
        pointer = jumped
      row_sources = np.take_along_axis(sources[:, r], pointer, axis=1)
      pixels[image_starts + (row * w + cols)] = pixels[image_starts + row_sources]
  return padded[:, :c].reshape(n, h, w, c)


def motion_blur(images: np.ndarray, c, rngs) -> np.ndarray:
  """ImageMagick motion blur at a random angle in [-45, 45) degrees.

  The original ran Wand's MotionBlurImage on a PNG and decoded the 8-bit PNG
  it wrote, hence rounding.
  """
  radius, sigma = c
  angles = [rng.uniform(-45, 45) for rng in rngs]
  return round_to_uint8(filters.motion_blur(images.astype(np.float32), radius,
                                            sigma, angles))


def zoom_blur(images: np.ndarray, max_factor: float, rngs) -> np.ndarray:
  """Mean of the image and its central zooms by 1, 1.01, ... < max_factor."""
  del rngs  # Deterministic.
  factors = tuple(float(f) for f in np.arange(1, max_factor, 0.01))
  _, h, w, _ = images.shape
  operator = filters.zoom_operator(h, w, factors, include_identity=True)
  return unit_to_uint8(filters.apply_pixel_operator(to_unit(images, np.float32),
                                                    operator))


def gaussian_blur(images: np.ndarray, sigma: float, rngs) -> np.ndarray:
  del rngs  # Deterministic.
  return unit_to_uint8(filters.gaussian(to_unit(images), sigma))
