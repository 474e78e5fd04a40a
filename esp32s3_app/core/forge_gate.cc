// The gate's arithmetic follows forge_tflm/evaluation/gate.py operation by
// operation in double precision (the logits dequantized in float first, as the
// evaluator's dequantize_output), and sums short vectors in numpy's pairwise
// order, so decisions agree with the evaluator except on exact ties.
#include "forge_gate.h"

#include <math.h>
#include <string.h>

namespace {

// numpy's pairwise summation (pairwise_sum in loops_utils.h) for n <= 128:
// sequential below 8 elements, else 8 interleaved partial sums combined as
// ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)), then the tail added in order.
double NumpySum(const double* x, int n) {
  if (n < 8) {
    double s = 0.0;
    for (int i = 0; i < n; ++i) s += x[i];
    return s;
  }
  double r[8];
  for (int k = 0; k < 8; ++k) r[k] = x[k];
  int i = 8;
  for (; i < n - (n % 8); i += 8) {
    for (int k = 0; k < 8; ++k) r[k] += x[i + k];
  }
  double s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
  for (; i < n; ++i) s += x[i];
  return s;
}

double Dot(const double* a, const double* b, int n) {
  double s = 0.0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// gate.entropy(p): -sum of p*log(p) over the positive entries.
double Entropy(const double* p, int n) {
  double terms[kForgeGateMaxClasses];
  int m = 0;
  for (int i = 0; i < n; ++i) {
    if (p[i] > 0.0) terms[m++] = p[i] * log(p[i]);
  }
  return -NumpySum(terms, m);
}

}  // namespace

ForgeGate::ForgeGate(const ForgeGateConfig& config)
    : config_(config),
      valid_(config.num_classes >= 1 && config.num_classes <= kForgeGateMaxClasses &&
             config.probe_images >= 1 && config.output_scale > 0.0f) {
  memset(sum_source_, 0, sizeof(sum_source_));
  memset(sum_adapted_, 0, sizeof(sum_adapted_));
  memset(last_, 0, sizeof(last_));
  memset(last_adapted_, 0, sizeof(last_adapted_));
}

void ForgeGate::Softmax(const int8_t* logits, double* p) const {
  const int k = config_.num_classes;
  double z[kForgeGateMaxClasses];
  for (int i = 0; i < k; ++i) {
    // float32 dequantization, then float64 (ProbeStats.of_batch).
    const float v = static_cast<float>(logits[i] - config_.output_zero_point) *
                    config_.output_scale;
    z[i] = static_cast<double>(v);
  }
  double top = z[0];
  for (int i = 1; i < k; ++i) top = z[i] > top ? z[i] : top;
  for (int i = 0; i < k; ++i) z[i] = exp(z[i] - top);
  const double total = NumpySum(z, k);
  for (int i = 0; i < k; ++i) p[i] = z[i] / total;
}

double ForgeGate::score() const {
  if (probed_ == 0) return last_score_;
  const int k = config_.num_classes;
  double ps[kForgeGateMaxClasses], pa[kForgeGateMaxClasses];
  for (int i = 0; i < k; ++i) {
    ps[i] = sum_source_[i] / probed_;
    pa[i] = sum_adapted_[i] / probed_;
  }
  return Entropy(pa, k) - Entropy(ps, k);
}

double ForgeGate::Autocorrelation(const double* sum, double squares,
                                  double lag_dot) const {
  if (pairs_ == 0) return 0.0;
  const int k = config_.num_classes;
  double mean[kForgeGateMaxClasses];
  for (int i = 0; i < k; ++i) mean[i] = sum[i] / probed_;
  const double base = Dot(mean, mean, k);
  const double spread = squares / probed_ - base;
  if (spread < 1e-3) return 0.0;  // SerialStats.MIN_SPREAD
  return (lag_dot / pairs_ - base) / spread;
}

double ForgeGate::autocorrelation() const {
  if (probed_ == 0) return last_autocorrelation_;
  return Autocorrelation(sum_source_, squares_, lag_dot_);
}

double ForgeGate::autocorrelation_adapted() const {
  if (probed_ == 0) return last_autocorrelation_adapted_;
  return Autocorrelation(sum_adapted_, squares_adapted_, lag_dot_adapted_);
}

ForgeGate::Event ForgeGate::Observe(const int8_t* source_logits,
                                    const int8_t* adapted_logits) {
  if (!valid_ || !probing_) return kNone;
  const int k = config_.num_classes;
  double ps[kForgeGateMaxClasses], pa[kForgeGateMaxClasses];
  Softmax(source_logits, ps);
  Softmax(adapted_logits, pa);
  for (int i = 0; i < k; ++i) {
    sum_source_[i] += ps[i];
    sum_adapted_[i] += pa[i];
  }
  if (probed_ > 0) {
    lag_dot_ += Dot(last_, ps, k);
    lag_dot_adapted_ += Dot(last_adapted_, pa, k);
    ++pairs_;
  }
  double sq[kForgeGateMaxClasses];
  for (int i = 0; i < k; ++i) sq[i] = ps[i] * ps[i];
  squares_ += NumpySum(sq, k);
  for (int i = 0; i < k; ++i) sq[i] = pa[i] * pa[i];
  squares_adapted_ += NumpySum(sq, k);
  memcpy(last_, ps, sizeof(double) * k);
  memcpy(last_adapted_, pa, sizeof(double) * k);
  ++probed_;
  Event event = kNone;
  const bool last = probed_ == config_.probe_images;
  if (last || (config_.early_images > 0 && probed_ >= config_.early_images)) {
    // GatedForge.predict: the whole probe's decision, or an early "on".
    const double rho = autocorrelation();
    const double rho_adapted = autocorrelation_adapted();
    const double s = score();
    if (last) {
      // gate_fires: the veto, unless concealed_veto and the adapting path shows
      // the correlation too.
      const bool vetoed = rho > config_.max_autocorrelation &&
                          !(config_.concealed_veto &&
                            rho_adapted > config_.max_autocorrelation);
      Decide(!vetoed && s > config_.delta, s, rho, rho_adapted);
    } else if (rho <= config_.early_max_autocorrelation && s > config_.early_delta) {
      Decide(true, s, rho, rho_adapted);
    }
    if (!probing_) event = fired_ ? kDecidedOn : kDecidedOff;
  }
  Advance();
  return event;
}

void ForgeGate::Decide(bool fired, double score, double rho, double rho_adapted) {
  fired_ = fired;
  observing_ = !fired_ && config_.keep_state && fabs(score) < config_.inert_score;
  ++decisions_;
  probing_ = false;
  last_score_ = score;
  last_autocorrelation_ = rho;
  last_autocorrelation_adapted_ = rho_adapted;
}

void ForgeGate::Skip() {
  if (!valid_ || probing_) return;
  Advance();
}

void ForgeGate::Advance() {
  ++since_probe_;
  if (config_.period > 0 && !probing_ && since_probe_ >= config_.period) {
    probing_ = true;
    since_probe_ = 0;
    probed_ = 0;
    pairs_ = 0;
    lag_dot_ = squares_ = lag_dot_adapted_ = squares_adapted_ = 0.0;
    memset(sum_source_, 0, sizeof(sum_source_));
    memset(sum_adapted_, 0, sizeof(sum_adapted_));
  }
}
