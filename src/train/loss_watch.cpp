#include "train/loss_watch.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/error.hpp"
#include "train/config.hpp"

namespace tandem::train {

std::string Collapse::describe(int window) const {
  if (non_finite) return fmt::format("the loss became {} at step {}", now, step);
  return fmt::format("the loss rose back to {:.4g} (mean of the last {} steps) at step {}, above the {:.4g} it "
                     "started at, after reaching {:.4g}",
                     now, window, step, start, best);
}

LossWatch::LossWatch(int window, double progress, bool rises) : window_(window), progress_(progress), rises_(rises) {
  TANDEM_ENFORCE(window >= 1 && progress > 0 && progress < 1, "loss watch window {} progress {}", window, progress);
}

std::optional<Collapse> LossWatch::observe(int64_t step, double loss) {
  if (reported_) return std::nullopt;
  Collapse c;
  c.step = step;
  if (!std::isfinite(loss)) {
    reported_ = true;
    c.non_finite = true;
    c.now = loss;
    c.start = start_.value_or(0);
    c.best = best_;
    return c;
  }
  if (!rises_) return std::nullopt;
  recent_.push_back(loss);
  recent_sum_ += loss;
  if (static_cast<int>(recent_.size()) > window_) {
    recent_sum_ -= recent_.front();
    recent_.pop_front();
  }
  if (static_cast<int>(recent_.size()) < window_) return std::nullopt;
  const double mean = recent_sum_ / window_;
  if (!start_) {
    start_ = mean;
    best_ = mean;
    return std::nullopt;
  }
  best_ = std::min(best_, mean);
  // "Above where it started" means nothing for a loss that starts at or below zero.
  if (*start_ <= 0 || best_ > progress_ * *start_ || mean <= *start_) return std::nullopt;
  reported_ = true;
  c.start = *start_;
  c.best = best_;
  c.now = mean;
  return c;
}

std::string collapseAdvice(const TrainConfig& config, double lr, bool stale) {
  const auto& o = config.optimizer;
  const bool momentum = (o.name == "sgd" || o.name == "rmsprop") && o.momentum > 0;
  std::string advice;
  if (stale) {
    advice = fmt::format("Asynchronous updates are stale, and staleness acts as extra momentum: at lr {}{}, try ", lr,
                         momentum ? fmt::format(" with momentum {}", o.momentum) : "");
    if (!stalenessLrOn(config.distributed)) advice += "--staleness-lr on, ";
    const auto& d = config.distributed;
    if (momentum && !momentumCorrectionOn(d) && d.delay_compensation == 0 && d.ps_replicas == 1) {
      advice += "--async-momentum-correction on (or a lower --momentum), ";
    } else if (momentum) {
      advice += "a lower --momentum, ";
    }
    advice += "--delay-compensation 2, or a lower --lr";
  } else {
    advice = fmt::format("Try a lower --lr (now {}), --warmup-steps 500, or check the data", lr);
  }
  return advice + ". --stop-on-collapse off lets such a run go on.";
}

}  // namespace tandem::train
