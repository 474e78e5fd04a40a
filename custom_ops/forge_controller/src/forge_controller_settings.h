// The field controller's settings, declared once. Each X(type, name, MACRO,
// default, help) becomes a ForgeControllerSettings field, the firmware define
// FORGE_APP_GATE_<MACRO> (forge_tflm.deploy.export writes them), the host app's
// --gate_<name>= argument and the evaluator's --gate_<name> flag
// (forge_tflm.evaluation.gate reads this list through the bound module).
// Types: u32 (unsigned images), f64 (real). What each setting does and
// the measurement that set its default: docs/design/field-robustness.md.
#ifndef FORGE_CONTROLLER_SETTINGS_H_
#define FORGE_CONTROLLER_SETTINGS_H_

#define FORGE_CONTROLLER_SETTINGS(X)                                                \
  X(u32, probe_images, PROBE_IMAGES, 256,                                           \
    "images per probe: both paths run, the path chosen last predicts")              \
  X(u32, period, PERIOD, 0,                                                         \
    "images from the start of one probe to the next (unset: one decision a stream)")\
  X(f64, delta, DELTA, 0.03,                                                        \
    "adapt iff the probe's diversity gain (nats) exceeds this")                    \
  X(u32, label_window, LABEL_WINDOW, 4096,                                         \
    "label-correlation detector: images its class histogram spans; 0: off")

#endif  // FORGE_CONTROLLER_SETTINGS_H_
