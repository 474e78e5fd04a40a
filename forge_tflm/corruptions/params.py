"""Severity tables of the two parameter sets (five entries = severities 1..5).

The numbers are the benchmark's definition (Hendrycks & Dietterich, ICLR 2019):
"cifar" is the CIFAR-10-C / CIFAR-100-C set for 32x32 images, "tinyimagenet"
the Tiny-ImageNet-C set for 64x64 images. Each entry is one severity's
parameter tuple; the comments name the fields.
"""

from __future__ import annotations

# The standard order of the 15 benchmark corruptions.
CORRUPTIONS = (
    "gaussian_noise", "shot_noise", "impulse_noise",
    "defocus_blur", "glass_blur", "motion_blur", "zoom_blur",
    "snow", "frost", "fog",
    "brightness", "contrast", "elastic_transform", "pixelate", "jpeg_compression",
)

# The generator's four extra corruptions, never used for evaluation: design-time
# choices (layer selection) are made on these so that they never see the 15 above.
HELD_OUT_CORRUPTIONS = ("speckle_noise", "gaussian_blur", "spatter", "saturate")
ALL_CORRUPTIONS = CORRUPTIONS + HELD_OUT_CORRUPTIONS

# Tiny-ImageNet elastic parameters are written as fractions of IMSIZE.
_T = 64

PARAMETER_SETS = {
    "cifar": {
        "image_size": 32,
        # Frost textures are scaled by this factor before a random crop.
        "frost_texture_scale": 0.2,
        "gaussian_noise": (0.04, 0.06, 0.08, 0.09, 0.10),  # noise std (0..1 scale)
        "shot_noise": (500, 250, 100, 75, 50),  # photons per unit intensity
        "impulse_noise": (0.01, 0.02, 0.03, 0.05, 0.07),  # s&p amount
        # (disk radius, alias blur sigma)
        "defocus_blur": ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)),
        # (gaussian sigma, max pixel displacement, iterations)
        "glass_blur": ((0.05, 1, 1), (0.25, 1, 1), (0.4, 1, 1), (0.25, 1, 2), (0.4, 1, 2)),
        # (ImageMagick radius, sigma)
        "motion_blur": ((6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5)),
        # (largest zoom factor, exclusive); factors are arange(1, this, 0.01)
        "zoom_blur": (1.06, 1.11, 1.16, 1.21, 1.26),
        # (mean, std, zoom, threshold, blur radius, blur sigma, image weight)
        "snow": ((0.1, 0.2, 1, 0.6, 8, 3, 0.95),
                 (0.1, 0.2, 1, 0.5, 10, 4, 0.9),
                 (0.15, 0.3, 1.75, 0.55, 10, 4, 0.9),
                 (0.25, 0.3, 2.25, 0.6, 12, 6, 0.85),
                 (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8)),
        # (image weight, frost weight)
        "frost": ((1, 0.2), (1, 0.3), (0.9, 0.4), (0.85, 0.4), (0.75, 0.45)),
        # (fog strength, plasma wibble decay)
        "fog": ((0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75)),
        "brightness": (0.05, 0.1, 0.15, 0.2, 0.3),  # added to HSV value
        "contrast": (0.75, 0.5, 0.4, 0.3, 0.15),  # factor around the channel mean
        # (displacement scale, displacement smoothing sigma, affine jitter), in
        # pixels: IMSIZE * (0, 0, .08), (.05, .2, .07), (.08, .06, .06),
        # (.1, .04, .05), (.1, .03, .03) with IMSIZE = 32.
        "elastic_transform": ((32 * 0, 32 * 0, 32 * 0.08),
                              (32 * 0.05, 32 * 0.2, 32 * 0.07),
                              (32 * 0.08, 32 * 0.06, 32 * 0.06),
                              (32 * 0.1, 32 * 0.04, 32 * 0.05),
                              (32 * 0.1, 32 * 0.03, 32 * 0.03)),
        "pixelate": (0.95, 0.9, 0.85, 0.75, 0.65),  # downscale factor
        "jpeg_compression": (80, 65, 58, 50, 40),  # JPEG quality
        # Held out (make_cifar_c.py's extra corruptions).
        "speckle_noise": (0.06, 0.1, 0.12, 0.16, 0.2),  # multiplicative noise std
        "gaussian_blur": (0.4, 0.6, 0.7, 0.8, 1.0),  # sigma in pixels
        # (liquid mean, liquid std, liquid blur sigma, threshold, mud blur sigma or
        # water strength, 0 = water / 1 = mud)
        "spatter": ((0.62, 0.1, 0.7, 0.7, 0.5, 0),
                    (0.65, 0.1, 0.8, 0.7, 0.5, 0),
                    (0.65, 0.3, 1, 0.69, 0.5, 0),
                    (0.65, 0.1, 0.7, 0.69, 0.6, 1),
                    (0.65, 0.1, 0.5, 0.68, 0.6, 1)),
        # (saturation factor, saturation offset)
        "saturate": ((0.3, 0), (0.1, 0), (2, 0), (5, 0.1), (20, 0.1)),
    },
    "tinyimagenet": {
        "image_size": 64,
        "frost_texture_scale": 0.3,
        "gaussian_noise": (0.04, 0.08, 0.12, 0.15, 0.18),
        "shot_noise": (250, 100, 50, 30, 15),
        "impulse_noise": (0.01, 0.02, 0.05, 0.08, 0.14),
        "defocus_blur": ((0.5, 0.6), (1, 0.1), (1.5, 0.1), (2.5, 0.01), (3, 0.1)),
        "glass_blur": ((0.1, 1, 1), (0.5, 1, 1), (0.6, 1, 2), (0.7, 2, 1), (0.9, 2, 2)),
        "motion_blur": ((10, 1), (10, 1.5), (10, 2), (10, 2.5), (12, 3)),
        "zoom_blur": (1.06, 1.11, 1.16, 1.21, 1.26),
        "snow": ((0.1, 0.2, 1, 0.6, 8, 3, 0.8),
                 (0.1, 0.2, 1, 0.5, 10, 4, 0.8),
                 (0.15, 0.3, 1.75, 0.55, 10, 4, 0.7),
                 (0.25, 0.3, 2.25, 0.6, 12, 6, 0.65),
                 (0.3, 0.3, 1.25, 0.65, 14, 12, 0.6)),
        "frost": ((1, 0.3), (0.9, 0.4), (0.8, 0.45), (0.75, 0.5), (0.7, 0.55)),
        "fog": ((0.4, 3), (0.7, 3), (1, 2.5), (1.5, 2), (2, 1.75)),
        "brightness": (0.1, 0.2, 0.3, 0.4, 0.5),
        "contrast": (0.4, 0.3, 0.2, 0.1, 0.05),
        # IMSIZE * (0, 0, .08), (.05, .3, .06), (.1, .08, .06), (.1, .03, .03),
        # (.16, .03, .02) with IMSIZE = 64.
        "elastic_transform": ((_T * 0, _T * 0, _T * 0.08),
                              (_T * 0.05, _T * 0.3, _T * 0.06),
                              (_T * 0.1, _T * 0.08, _T * 0.06),
                              (_T * 0.1, _T * 0.03, _T * 0.03),
                              (_T * 0.16, _T * 0.03, _T * 0.02)),
        "pixelate": (0.9, 0.8, 0.7, 0.6, 0.5),
        "jpeg_compression": (65, 58, 50, 40, 25),
    },
}

SEVERITIES = (1, 2, 3, 4, 5)


def severity_params(param_set: str, corruption: str, severity: int):
  """Returns the table entry of `corruption` at `severity` in `param_set`."""
  if param_set not in PARAMETER_SETS:
    raise ValueError(f"unknown parameter set {param_set!r};"
                     f" known: {sorted(PARAMETER_SETS)}")
  if corruption not in ALL_CORRUPTIONS:
    raise ValueError(f"unknown corruption {corruption!r}; known: {ALL_CORRUPTIONS}")
  if corruption not in PARAMETER_SETS[param_set]:
    raise ValueError(f"{corruption} has no {param_set!r} parameters (the held-out"
                     f" corruptions are defined for 'cifar' only)")
  if severity not in SEVERITIES:
    raise ValueError(f"severity must be one of {SEVERITIES}, got {severity!r}")
  return PARAMETER_SETS[param_set][corruption][severity - 1]

# Mean absolute pixel difference (0..255) between severity-5 and clean images
# of the CIFAR-10 test split, measured with the benchmark's reference generator
# on the project's copy of the data: the fidelity target of this
# implementation (tests/corruptions/test_fidelity.py).
CIFAR10_TEST_SEVERITY5_MAD = {
    "gaussian_noise": 19.5, "shot_noise": 18.3, "impulse_noise": 8.9,
    "defocus_blur": 9.5, "glass_blur": 17.7, "motion_blur": 15.4,
    "zoom_blur": 16.6, "snow": 51.2, "frost": 42.9, "fog": 38.9,
    "brightness": 55.7, "contrast": 35.9, "elastic_transform": 13.8,
    "pixelate": 8.9, "jpeg_compression": 7.2,
}
