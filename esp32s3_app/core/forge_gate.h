// The FORGE gate on the device: decides, from the model's own outputs, whether
// adapting helps, and keeps deciding without stream boundaries. The same rule
// as the evaluator's `forge-gated` method with its default signal
// (forge_tflm/evaluation/gate.py: GatedForge, ProbeStats, SerialStats), at
// batch 1, so a device predicts what `forge_tflm eval --batch_size=1
// --methods=forge-gated` predicted (tests/deploy/test_host_parity.py checks it
// image by image). Framework-free: the caller runs the model.
//
//   ForgeGate gate(config);                 // config.num_classes, scale, zp...
//   for each image:
//     if (gate.probing()) {                 // both passes, state kept
//       run in FORGE_RECALIB_MODE_SOURCE -> src;  run in _ADAPT -> adp;
//       out = gate.adapting() ? adp : src;
//       if (gate.Observe(src, adp) == ForgeGate::kDecidedOff) reset FORGE state;
//     } else {
//       out = run in gate.adapting() ? _ADAPT : _FROZEN;  // (or _SOURCE: keep_state)
//       if (gate.observing()) hand out to ObserveOutput;
//       gate.Skip();
//     }
//
// Probe: `probe_images` images in which both paths run and the prediction
// comes from the path chosen last (the source before the first decision). Then
// adapting continues iff H(mean p_adapted) - H(mean p_source) > delta (nats,
// "does adapting undo the source's collapse?") and the source's predictions
// over the probe are not label-correlated (lag-1 autocorrelation of its
// softmax vectors <= max_autocorrelation; with concealed_veto, or the adapting
// path's own predictions are label-correlated too); from early_images probed images on,
// a running score above early_delta (autocorrelation <= early_max_autocorrelation)
// decides "on" without waiting for the end of the probe. With period > 0 a new probe starts
// `period` images after the previous one started. Every "off" decision resets
// FORGE to its clean targets. Memory: 4 * kForgeGateMaxClasses + 7 doubles.
#ifndef ESP32S3_APP_CORE_FORGE_GATE_H_
#define ESP32S3_APP_CORE_FORGE_GATE_H_

#include <stddef.h>
#include <stdint.h>

struct ForgeGateConfig {
  int num_classes = 10;       // <= kForgeGateMaxClasses
  float output_scale = 1.0f;  // the model's int8 output quantization
  int32_t output_zero_point = 0;
  uint32_t probe_images = 256;
  double delta = 0.03;
  uint32_t period = 0;               // 0: decide once
  double max_autocorrelation = 0.1;  // veto above it; a huge value: no veto
  // The veto holds only if the adapting path's predictions over the probe are
  // not label-correlated themselves (adaptation concealed the correlation):
  // class-balanced models (gate.py for_model, GateConfig.concealed_veto).
  bool concealed_veto = false;
  // Off decisions keep FORGE's state and predict in source mode (class-balanced
  // models: forge_tflm.evaluation.gate.for_model); false: reset, then frozen.
  bool keep_state = false;
  // With keep_state: after an off decision whose probe scored within this of 0
  // (the adapting path changed nothing), the app hands each source-mode output
  // to the guard's detector until the next probe (observing(); gate.py
  // DEFAULT_INERT_SCORE, SPEC "Observe"); 0: never.
  double inert_score = 0.001;
  // Early "on": from this many probed images on, a probe whose running score
  // exceeds early_delta and whose autocorrelation is <= early_max_autocorrelation
  // decides "on" at once; "off" always takes the whole probe (gate.py
  // DEFAULT_EARLY_IMAGES; export-firmware sets 0 for label-blind models). 0: never.
  uint32_t early_images = 128;
  double early_delta = 0.1;
  double early_max_autocorrelation = 0.1;
};

constexpr int kForgeGateMaxClasses = 64;

class ForgeGate {
 public:
  enum Event { kNone = 0, kDecidedOn, kDecidedOff };

  explicit ForgeGate(const ForgeGateConfig& config);
  bool valid() const { return valid_; }
  bool probing() const { return probing_; }
  bool adapting() const { return fired_; }
  // Off after an inert probe (config.inert_score): feed the source's outputs to
  // the detector (ForgeRecalibControl::ObserveOutput).
  bool observing() const { return observing_; }
  uint32_t decisions() const { return decisions_; }
  double score() const;            // the last (or current) probe's
  double autocorrelation() const;  // idem (the source path's)
  double autocorrelation_adapted() const;  // idem (the adapting path's)

  // One probed image: both paths' int8 logits. Returns the decision's effect
  // when this image ends the probe, else kNone.
  Event Observe(const int8_t* source_logits, const int8_t* adapted_logits);
  // One image outside a probe.
  void Skip();

 private:
  void Softmax(const int8_t* logits, double* p) const;
  // SerialStats over the probe of one path: its summed softmax vectors `sum`,
  // squares and lag-1 dot products.
  double Autocorrelation(const double* sum, double squares, double lag_dot) const;
  void Decide(bool fired, double score, double rho, double rho_adapted);
  void Advance();

  ForgeGateConfig config_;
  bool valid_;
  bool probing_ = true;
  bool fired_ = false;
  bool observing_ = false;
  uint32_t decisions_ = 0;
  uint32_t probed_ = 0;
  uint32_t since_probe_ = 0;
  // ProbeStats: summed softmax vectors per path.
  double sum_source_[kForgeGateMaxClasses];
  double sum_adapted_[kForgeGateMaxClasses];
  // SerialStats of the source path and of the adapting path (same pairs).
  uint32_t pairs_ = 0;
  double lag_dot_ = 0.0, squares_ = 0.0;
  double lag_dot_adapted_ = 0.0, squares_adapted_ = 0.0;
  double last_[kForgeGateMaxClasses];
  double last_adapted_[kForgeGateMaxClasses];
  double last_score_ = 0.0, last_autocorrelation_ = 0.0;
  double last_autocorrelation_adapted_ = 0.0;
};

#endif  // ESP32S3_APP_CORE_FORGE_GATE_H_
