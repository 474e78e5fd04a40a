// The field controller (forge_controller.h). Double precision throughout: the
// outputs are dequantized in float32 (as the model's own output parameters
// give them), then everything is double.
#include "forge_controller.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

// Below it a probe's predictions barely vary (a collapsed source): its
// autocorrelation carries no evidence and counts as 0.
#define FORGE_CONTROLLER_MIN_SPREAD 1e-3

void forge_controller_default_settings(ForgeControllerSettings* s) {
#define FORGE_CONTROLLER_DEFAULT(type, name, macro, value, help) s->name = value;
  FORGE_CONTROLLER_SETTINGS(FORGE_CONTROLLER_DEFAULT)
#undef FORGE_CONTROLLER_DEFAULT
}

const char* forge_controller_check(const ForgeControllerSettings* s) {
  if (s->probe_images < 1) return "probe_images";
  if (!isfinite(s->delta)) return "delta";
  if (!isfinite(s->max_autocorrelation)) return "max_autocorrelation";
  if (!(s->inert_score >= 0.0) || !isfinite(s->inert_score)) return "inert_score";
  if (!isfinite(s->early_delta) || s->early_delta < s->delta) return "early_delta";
  if (!isfinite(s->early_max_autocorrelation)) return "early_max_autocorrelation";
  return NULL;
}

static void clear_probe(ForgeController* c) {
  memset(&c->source, 0, sizeof(c->source));
  memset(&c->adapted, 0, sizeof(c->adapted));
  c->probed = 0;
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
  return true;
}

ForgeControllerStep forge_controller_next(const ForgeController* c) {
  if (c->probing) return FORGE_CONTROLLER_PROBE;
  if (c->adapting) return FORGE_CONTROLLER_ADAPT;
  if (!c->settings.keep_state) return FORGE_CONTROLLER_FROZEN;
  return c->observing ? FORGE_CONTROLLER_OBSERVE : FORGE_CONTROLLER_SOURCE;
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

static double dot(const double* a, const double* b, int n) {
  double s = 0.0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// One image of one path: its softmax vector into the probe's sums.
static void add_image(const ForgeController* c, ForgeControllerPath* path,
                      const int8_t* logits) {
  const int k = c->num_classes;
  double p[FORGE_CONTROLLER_MAX_CLASSES];
  softmax(c, logits, p);
  if (c->probed > 0) path->lag_dot += dot(path->last, p, k);
  path->squares += dot(p, p, k);
  for (int i = 0; i < k; ++i) path->sum[i] += p[i];
  memcpy(path->last, p, sizeof(double) * (size_t)k);
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
  return entropy_of_mean(c->adapted.sum, c->probed, c->num_classes) -
         entropy_of_mean(c->source.sum, c->probed, c->num_classes);
}

// (mean <p_t, p_t-1> - |p_bar|^2) / (mean |p_t|^2 - |p_bar|^2): 0 for i.i.d.
// labels, near 1 when neighbours share a class.
static double path_autocorrelation(const ForgeController* c, const ForgeControllerPath* p) {
  if (c->probed < 2) return 0.0;
  double mean[FORGE_CONTROLLER_MAX_CLASSES];
  for (int i = 0; i < c->num_classes; ++i) mean[i] = p->sum[i] / c->probed;
  const double base = dot(mean, mean, c->num_classes);
  const double spread = p->squares / c->probed - base;
  if (spread < FORGE_CONTROLLER_MIN_SPREAD) return 0.0;
  return (p->lag_dot / (c->probed - 1) - base) / spread;
}

double forge_controller_autocorrelation(const ForgeController* c, bool adapted) {
  if (c->probed == 0) return adapted ? c->autocorrelation_adapted : c->autocorrelation;
  return path_autocorrelation(c, adapted ? &c->adapted : &c->source);
}

static ForgeControllerEvent decide(ForgeController* c, bool on) {
  c->score = forge_controller_score(c);
  c->autocorrelation = forge_controller_autocorrelation(c, false);
  c->autocorrelation_adapted = forge_controller_autocorrelation(c, true);
  c->adapting = on;
  c->observing = !on && c->settings.keep_state && fabs(c->score) < c->settings.inert_score;
  c->probing = false;
  ++c->decisions;
  if (on) return FORGE_CONTROLLER_ON;
  return c->settings.keep_state ? FORGE_CONTROLLER_OFF : FORGE_CONTROLLER_OFF_RESET;
}

// At the end of a probed batch: the whole probe's decision, an early "on", or none.
static ForgeControllerEvent maybe_decide(ForgeController* c) {
  const ForgeControllerSettings* s = &c->settings;
  const bool last = c->probed >= s->probe_images;
  // Scores cost K logs per path: only where a decision can fall.
  if (!last && (s->early_images == 0 || c->probed < s->early_images)) {
    return FORGE_CONTROLLER_NONE;
  }
  const double score = forge_controller_score(c);
  const double rho = forge_controller_autocorrelation(c, false);
  if (last) {
    const bool vetoed = rho > s->max_autocorrelation &&
                        !(s->concealed_veto &&
                          forge_controller_autocorrelation(c, true) > s->max_autocorrelation);
    return decide(c, !vetoed && score > s->delta);
  }
  if (rho <= s->early_max_autocorrelation && score > s->early_delta) {
    return decide(c, true);
  }
  return FORGE_CONTROLLER_NONE;
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
  for (uint32_t i = 0; i < n; ++i) {
    add_image(c, &c->source, source + (size_t)i * k);
    add_image(c, &c->adapted, adapted + (size_t)i * k);
    ++c->probed;
  }
  const ForgeControllerEvent event = maybe_decide(c);
  advance(c, n);
  return event;
}

void forge_controller_skipped(ForgeController* c, uint32_t n) {
  if (!c->probing) advance(c, n);
}
