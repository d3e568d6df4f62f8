// sinkq/train/adamw.h — AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization", ICLR
// 2019) and the cosine learning-rate schedule, for the training steps of issue 14 (IntactKV+Cal:
// AdamW lr 2e-4; PrefixQuant / EfficientQAT block-wise fine-tuning: AdamW with cosine decay).
// Deterministic: no randomness, a fixed update order; the same inputs give the same bits.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.h"

namespace sinkq::train {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // decoupled: p -= lr·wd·p, not added to the gradient
};

// The learning rate of step t (0-based) of `total` under cosine decay from lr to min_lr
// (PyTorch's CosineAnnealingLR without restarts): min_lr + (lr − min_lr)·(1 + cos(π·t/total))/2.
inline double cosine_lr(double lr, double min_lr, int64_t t, int64_t total) {
  if (total <= 0) return lr;
  const double pi = std::acos(-1.0);
  return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(pi * double(std::min(t, total)) / double(total)));
}

// One optimiser state per parameter tensor (its first and second moments).
template <typename R>
class AdamW {
 public:
  explicit AdamW(size_t n, AdamWOptions o = {}) : o_(o), m_(n, R(0)), v_(n, R(0)) {
    SINKQ_CHECK(o.lr >= 0 && o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1 && o.eps > 0 &&
                    o.weight_decay >= 0,
                "AdamW: lr {} beta1 {} beta2 {} eps {} weight_decay {} out of range", o.lr, o.beta1, o.beta2, o.eps,
                o.weight_decay);
  }
  // p[i] -= lr·(m̂/(sqrt(v̂) + eps) + wd·p[i]) with the bias-corrected moments of step t + 1; lr
  // overrides the options' (a schedule), negative = the options' lr.
  void step(R* p, const R* g, double lr = -1) {
    const double a = lr < 0 ? o_.lr : lr;
    ++t_;
    const double c1 = 1.0 - std::pow(o_.beta1, double(t_)), c2 = 1.0 - std::pow(o_.beta2, double(t_));
    for (size_t i = 0; i < m_.size(); ++i) {
      m_[i] = R(o_.beta1) * m_[i] + R(1.0 - o_.beta1) * g[i];
      v_[i] = R(o_.beta2) * v_[i] + R(1.0 - o_.beta2) * g[i] * g[i];
      const double mh = double(m_[i]) / c1, vh = double(v_[i]) / c2;
      p[i] = R(double(p[i]) - a * (mh / (std::sqrt(vh) + o_.eps) + o_.weight_decay * double(p[i])));
    }
  }
  int64_t steps() const { return t_; }

 private:
  AdamWOptions o_;
  std::vector<R> m_, v_;
  int64_t t_ = 0;
};

}  // namespace sinkq::train
