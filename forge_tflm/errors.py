"""The package's error for an unusable model/manifest pair.

A leaf module: `forge_tflm.artifact` (which runs the model checks) and
`forge_tflm.model_check` (which raises them) both import it, so neither imports the
other to name the error.
"""


class ArtifactError(ValueError):
  """A model/manifest pair that cannot be used; the message is one line."""
