"""The method paper's experiments as commands: `forge_tflm experiment NAME`.

Each experiment measures on the bundled models and the local data, and writes
results/NAME/: result.json (the numbers, the command, artifact hashes, data source,
package versions), result.md (tables and a line-by-line comparison with the paper's
figure) and result.png. EXPERIMENTS names the ones that exist.
"""

from forge_tflm.experiments.common import EXPERIMENTS, ExperimentContext, run_experiment

__all__ = ["EXPERIMENTS", "ExperimentContext", "run_experiment"]
