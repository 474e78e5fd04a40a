"""Deployment helpers: expected device outputs from the host evaluator, image streams
for devices (raw files, C arrays), and parsing of the application core's output.

The application core itself is C++ in esp32s3_app/core; the host builds that the
parity tests run are in esp32s3_app/host (tests/deploy).
"""

from forge_tflm.deploy.expected import (ExpectedGated, ExpectedOutputs, checksum,
                                        expected_gated, expected_outputs, model_ops)
from forge_tflm.deploy.report import AppRun, parse_app_output
from forge_tflm.deploy.streams import (ImageStream, corrupted_stream, model_input,
                                       write_c_arrays, write_image_stream)

__all__ = [
    "AppRun", "ExpectedGated", "ExpectedOutputs", "ImageStream", "checksum",
    "corrupted_stream", "expected_gated", "expected_outputs", "model_input", "model_ops", "parse_app_output",
    "write_c_arrays", "write_image_stream",
]
