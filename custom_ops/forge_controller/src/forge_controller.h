// The field controller: when FORGE adapts, decided from the model's own outputs,
// for the device and the evaluator alike (forge_tflm.evaluation.gate drives this
// code through its Python binding). Framework-free C: the caller runs the model.
//
//   ForgeController c;  forge_controller_init(&c, &settings, classes, scale, zp);
//   for each batch of n images (n = 1 on a device):
//     switch (step = forge_controller_next(&c)) {  // each run's op mode:
//                                                   forge_controller_op_mode(&c, step)
//       case FORGE_CONTROLLER_PROBE:   run SOURCE -> src and
//         forge_controller_op_mode(&c, step) (ADAPT or ADAPT_SAFE) -> adp;
//         predict with forge_controller_adapting(&c) ? adp : src;
//         event = forge_controller_probed(&c, src, adp, n);
//         if (event == FORGE_CONTROLLER_OFF) reset FORGE to its targets;
//       case FORGE_CONTROLLER_ADAPT:   run ADAPT;
//       case FORGE_CONTROLLER_ADAPT_SAFE: run ADAPT_SAFE (label-safe ops adapt,
//                                      the others run source mode);
//       case FORGE_CONTROLLER_FROZEN:  run FROZEN;
//     }  then, outside a probe: forge_controller_ran(&c, output, n);
//
// Settings from the FORGE_APP_GATE_<MACRO> defines export-firmware writes into
// forge_app_data.h, so a firmware runs the gate that was evaluated:
//   FORGE_CONTROLLER_SETTINGS_FROM_DEFINES(config.gate_settings);
//
// A probe runs both paths over probe_images images and then adapts iff the
// diversity gain H(mean p_adapted) - H(mean p_source) exceeds delta (p: the
// softmax of the int8 outputs, or the outputs themselves where they carry the int8
// SOFTMAX quantization, scale 1/256 and zero point -128). Decisions fall at the
// end of a call (a batch). With period > 0 a new probe starts period images after
// the last one started.
//
// A score measures one adapting path: its sums start again when the detector
// switches the path within a probe.
//
// One label-correlation detector per model reads every image's predicted class
// (the source's during a probe, else the output the image was given): the rate at
// which consecutive predictions agree (over about label_window / 32 images) against
// the rate a class histogram over about label_window images predicts. A fixed
// camera on one object agrees far more often than its histogram predicts. While it
// flags, adapting runs in the op's ADAPT_SAFE mode: only the statistics that a run
// of one class cannot bend adapt (op SPEC "Adapt-safe mode").
// Memory: sizeof(ForgeController), 3 doubles per class of
// FORGE_CONTROLLER_MAX_CLASSES.
#ifndef FORGE_CONTROLLER_H_
#define FORGE_CONTROLLER_H_

#include <stdbool.h>
#include <stdint.h>

#include "forge_controller_settings.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef FORGE_CONTROLLER_MAX_CLASSES
#define FORGE_CONTROLLER_MAX_CLASSES 64
#endif

// The detector flags while consecutive predictions agree this many times more often
// than its histogram predicts; agreement is averaged over label_window / this many
// images (measured when the detector lived in the op: field_protocols_guard*.md).
#define FORGE_CONTROLLER_CORRELATED 1.75
#define FORGE_CONTROLLER_AGREEMENT_SPAN 32

typedef uint32_t forge_controller_u32;
typedef double forge_controller_f64;

typedef struct {
#define FORGE_CONTROLLER_FIELD(type, name, macro, value, help) \
  forge_controller_##type name;
  FORGE_CONTROLLER_SETTINGS(FORGE_CONTROLLER_FIELD)
#undef FORGE_CONTROLLER_FIELD
} ForgeControllerSettings;

// What the next call's images run.
typedef enum {
  FORGE_CONTROLLER_PROBE = 0,
  FORGE_CONTROLLER_ADAPT,
  FORGE_CONTROLLER_ADAPT_SAFE,
  FORGE_CONTROLLER_FROZEN,
} ForgeControllerStep;

// What a probed batch decided.
typedef enum {
  FORGE_CONTROLLER_NONE = 0,
  FORGE_CONTROLLER_ON,
  FORGE_CONTROLLER_OFF,  // the caller resets FORGE to its clean targets
} ForgeControllerEvent;

// The label-correlation detector (forge_controller.h).
typedef struct {
  double histogram[FORGE_CONTROLLER_MAX_CLASSES];  // sums to 1, starts uniform
  double agreement;  // the rate consecutive predictions agree, starts at 1/K
  int32_t previous;  // the last image's class, -1 before the first
} ForgeControllerLabels;

typedef struct {
  ForgeControllerSettings settings;
  int num_classes;
  float output_scale;
  int32_t output_zero_point;
  bool probabilities;  // The outputs are a softmax's (read as they are).
  bool probing;
  bool adapting;
  uint32_t decisions;
  uint32_t probed;
  uint32_t since_probe;
  double sum_source[FORGE_CONTROLLER_MAX_CLASSES];  // the probe's probabilities
  double sum_adapted[FORGE_CONTROLLER_MAX_CLASSES];
  double score;  // of the last decision
  // The adapting path (ADAPT or ADAPT_SAFE) of the last probed batch, whose sums
  // the probe holds (PROBE before the first).
  ForgeControllerStep path;
  ForgeControllerLabels labels;
} ForgeController;

#define FORGE_CONTROLLER_SET_FROM_DEFINE(type, name, macro, value, help) \
  forge_controller_target_->name = FORGE_APP_GATE_##macro;
#define FORGE_CONTROLLER_SETTINGS_FROM_DEFINES(target)                         \
  do {                                                                         \
    ForgeControllerSettings* forge_controller_target_ = &(target);             \
    FORGE_CONTROLLER_SETTINGS(FORGE_CONTROLLER_SET_FROM_DEFINE)                \
  } while (0)

void forge_controller_default_settings(ForgeControllerSettings* settings);
// The first setting that is out of range ("probe_images", ...), or NULL.
const char* forge_controller_check(const ForgeControllerSettings* settings);
// False (nothing set) on bad settings, classes outside [1, MAX] or scale <= 0.
bool forge_controller_init(ForgeController* c, const ForgeControllerSettings* settings,
                           int num_classes, float output_scale, int32_t output_zero_point);
ForgeControllerStep forge_controller_next(const ForgeController* c);
// How the adapting path runs now: FORGE_CONTROLLER_ADAPT, or _ADAPT_SAFE while the
// detector flags (a probe's adapting pass and the ADAPT steps alike).
ForgeControllerStep forge_controller_adapt_step(const ForgeController* c);
// The op's mode (forge_recalib_mode, forge_recalib.h) for a step; for
// FORGE_CONTROLLER_PROBE, its adapting pass's (the source pass runs SOURCE).
int32_t forge_controller_op_mode(const ForgeController* c, ForgeControllerStep step);
static inline bool forge_controller_adapting(const ForgeController* c) {
  return c->adapting;
}
// n probed images: both paths' int8 outputs, [n][num_classes] each.
ForgeControllerEvent forge_controller_probed(ForgeController* c, const int8_t* source,
                                             const int8_t* adapted, uint32_t n);
// n images outside a probe: the outputs they were given, [n][num_classes].
void forge_controller_ran(ForgeController* c, const int8_t* outputs, uint32_t n);
// The current probe's score (the last decision's between probes).
double forge_controller_score(const ForgeController* c);
// The detector's agreement rate and the rate its histogram predicts; it flags
// while agreement > FORGE_CONTROLLER_CORRELATED * chance.
double forge_controller_agreement(const ForgeController* c);
double forge_controller_chance(const ForgeController* c);
bool forge_controller_correlated(const ForgeController* c);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // FORGE_CONTROLLER_H_
