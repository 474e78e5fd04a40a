// The field controller (forge_controller.h). Double precision throughout: the
// outputs are dequantized in float32 (as the model's own output parameters
// give them), then everything is double.
#include "forge_controller.h"

#include "forge_recalib.h"  // the op's modes (forge_controller_op_mode)

#include <math.h>
#include <stddef.h>
#include <string.h>

void forge_controller_default_settings(ForgeControllerSettings* s) {
#define FORGE_CONTROLLER_DEFAULT(type, name, macro, value, help) s->name = value;
  FORGE_CONTROLLER_SETTINGS(FORGE_CONTROLLER_DEFAULT)
#undef FORGE_CONTROLLER_DEFAULT
}

const char* forge_controller_check(const ForgeControllerSettings* s) {
  if (s->probe_images < 1) return "probe_images";
  if (!isfinite(s->delta)) return "delta";
  return NULL;
}

static void clear_probe(ForgeController* c) {
  memset(c->sum_source, 0, sizeof(c->sum_source));
  memset(c->sum_adapted, 0, sizeof(c->sum_adapted));
  c->probed = 0;
}

static void reset_labels(ForgeController* c) {
  const int k = c->num_classes;
  for (int i = 0; i < k; ++i) c->labels.histogram[i] = 1.0 / k;
  c->labels.agreement = 1.0 / k;
  c->labels.previous = -1;
}

bool forge_controller_init(ForgeController* c, const ForgeControllerSettings* settings,
                           int num_classes, float output_scale, int32_t output_zero_point) {
  if (forge_controller_check(settings) != NULL || num_classes < 1 ||
      num_classes > FORGE_CONTROLLER_MAX_CLASSES || !(output_scale > 0.0f)) {
    return false;
  }
  memset(c, 0, sizeof(*c));
  c->settings = *settings;
  c->num_classes = num_classes;
  c->output_scale = output_scale;
  c->output_zero_point = output_zero_point;
  // TFLite's int8 SOFTMAX always writes scale 1/256, zero point -128: such outputs are
  // probabilities already (a softmax of them would flatten every image towards uniform).
  c->probabilities = output_scale == 1.0f / 256.0f && output_zero_point == -128;
  c->probing = true;
  reset_labels(c);
  return true;
}

ForgeControllerStep forge_controller_adapt_step(const ForgeController* c) {
  return forge_controller_correlated(c) ? FORGE_CONTROLLER_ADAPT_SAFE : FORGE_CONTROLLER_ADAPT;
}

int32_t forge_controller_op_mode(const ForgeController* c, ForgeControllerStep step) {
  switch (step == FORGE_CONTROLLER_PROBE ? forge_controller_adapt_step(c) : step) {
    case FORGE_CONTROLLER_ADAPT: return FORGE_RECALIB_MODE_ADAPT;
    case FORGE_CONTROLLER_ADAPT_SAFE: return FORGE_RECALIB_MODE_ADAPT_SAFE;
    default: return FORGE_RECALIB_MODE_FROZEN;
  }
}

ForgeControllerStep forge_controller_next(const ForgeController* c) {
  if (c->probing) return FORGE_CONTROLLER_PROBE;
  return c->adapting ? forge_controller_adapt_step(c) : FORGE_CONTROLLER_FROZEN;
}

// One image's predicted class (the first maximum, as numpy's argmax) into the
// detector.
static void add_label(ForgeController* c, const int8_t* logits) {
  const int k = c->num_classes;
  ForgeControllerLabels* d = &c->labels;
  if (c->settings.label_window == 0) return;
  const double rate = 1.0 / c->settings.label_window;
  const double span = (double)c->settings.label_window / FORGE_CONTROLLER_AGREEMENT_SPAN;
  const double agree_rate = span > 1.0 ? 1.0 / span : 1.0;
  int best = 0;
  for (int i = 1; i < k; ++i) best = logits[i] > logits[best] ? i : best;
  for (int i = 0; i < k; ++i) d->histogram[i] *= 1.0 - rate;
  d->histogram[best] += rate;
  if (d->previous >= 0) {
    d->agreement += agree_rate * ((best == d->previous ? 1.0 : 0.0) - d->agreement);
  }
  d->previous = best;
}

double forge_controller_agreement(const ForgeController* c) { return c->labels.agreement; }

double forge_controller_chance(const ForgeController* c) {
  double e = 0.0;
  for (int i = 0; i < c->num_classes; ++i) e += c->labels.histogram[i] * c->labels.histogram[i];
  return e;
}

bool forge_controller_correlated(const ForgeController* c) {
  return c->settings.label_window > 0 &&
         forge_controller_agreement(c) > FORGE_CONTROLLER_CORRELATED * forge_controller_chance(c);
}

static void softmax(const ForgeController* c, const int8_t* logits, double* p) {
  const int k = c->num_classes;
  double top = -INFINITY, total = 0.0;
  for (int i = 0; i < k; ++i) {
    const float v = (float)(logits[i] - c->output_zero_point) * c->output_scale;
    p[i] = (double)v;
    top = p[i] > top ? p[i] : top;
  }
  for (int i = 0; i < k; ++i) {
    if (!c->probabilities) p[i] = exp(p[i] - top);
    total += p[i];
  }
  for (int i = 0; i < k; ++i) p[i] = total > 0.0 ? p[i] / total : 1.0 / k;
}

// One image of one path: its probability vector into the probe's sum.
static void add_image(const ForgeController* c, double* sum, const int8_t* logits) {
  double p[FORGE_CONTROLLER_MAX_CLASSES];
  softmax(c, logits, p);
  for (int i = 0; i < c->num_classes; ++i) sum[i] += p[i];
}

static double entropy_of_mean(const double* sum, uint32_t n, int k) {
  double h = 0.0;
  for (int i = 0; i < k; ++i) {
    const double p = sum[i] / n;
    if (p > 0.0) h -= p * log(p);
  }
  return h;
}

double forge_controller_score(const ForgeController* c) {
  if (c->probed == 0) return c->score;
  return entropy_of_mean(c->sum_adapted, c->probed, c->num_classes) -
         entropy_of_mean(c->sum_source, c->probed, c->num_classes);
}

static ForgeControllerEvent decide(ForgeController* c, bool on) {
  c->score = forge_controller_score(c);
  c->adapting = on;
  c->probing = false;
  ++c->decisions;
  return on ? FORGE_CONTROLLER_ON : FORGE_CONTROLLER_OFF;
}


static void advance(ForgeController* c, uint32_t n) {
  c->since_probe += n;
  if (c->settings.period > 0 && !c->probing && c->since_probe >= c->settings.period) {
    c->probing = true;
    c->since_probe = 0;
    clear_probe(c);
  }
}

ForgeControllerEvent forge_controller_probed(ForgeController* c, const int8_t* source,
                                             const int8_t* adapted, uint32_t n) {
  if (!c->probing || n == 0) return FORGE_CONTROLLER_NONE;
  const int k = c->num_classes;
  // These images ran the adapting path the detector chose before them: a score sums
  // one path's images, so a change of path starts the count again.
  const ForgeControllerStep path = forge_controller_adapt_step(c);
  if (path != c->path) {
    clear_probe(c);
    c->path = path;
  }
  for (uint32_t i = 0; i < n; ++i) {
    add_image(c, c->sum_source, source + (size_t)i * k);
    add_image(c, c->sum_adapted, adapted + (size_t)i * k);
    add_label(c, source + (size_t)i * k);  // the path adaptation leaves alone
    ++c->probed;
  }
  // Scores cost K logs per path: only at the probe's end.
  const ForgeControllerEvent event =
      c->probed >= c->settings.probe_images
          ? decide(c, forge_controller_score(c) > c->settings.delta)
          : FORGE_CONTROLLER_NONE;
  advance(c, n);
  return event;
}

void forge_controller_ran(ForgeController* c, const int8_t* outputs, uint32_t n) {
  if (c->probing || n == 0) return;
  for (uint32_t i = 0; i < n; ++i) add_label(c, outputs + (size_t)i * c->num_classes);
  advance(c, n);
}
