#include "ps/admission.hpp"

#include <fmt/format.h>

#include <utility>

namespace tandem::ps {

bool Admission::mayInit(const ServerConfig& c, const std::string& server) const {
  if (!initialised_) return false;
  // Only the chief's next start after a failure, naming the start that
  // initialised this server, may begin again here (CURVE has proved it a
  // job member); a second job's chief, or a repeat, may not.
  if (c.replaces == 0 || c.replaces != generation_) {
    throw Refusal{fmt::format("{} was already initialised (by another start of the chief, {:016x})", server,
                              generation_)};
  }
  return true;
}

void Admission::initialised(const ServerConfig& c) {
  initialised_ = true;
  ready_ = false;
  generation_ = c.generation;
  layout_fingerprint_ = c.layout_fingerprint;
  workers_ = c.workers;
  mode_ = c.mode;
}

void Admission::forget() {
  initialised_ = false;
  ready_ = false;
}

bool Admission::admitNow(const HeldHello& hello) {
  if (ready_ && hello.hello.generation == generation_) return true;
  held_.push_back(hello);
  return false;
}

std::vector<Admission::HeldHello> Admission::ready() {
  ready_ = true;
  std::vector<HeldHello> now, later;
  for (auto& h : held_) (h.hello.generation == generation_ ? now : later).push_back(std::move(h));
  held_ = std::move(later);  // another start's: the chief's next init may be theirs
  return now;
}

void Admission::check(const Hello& h) const {
  if (h.worker >= static_cast<uint32_t>(workers_)) {
    throw Refusal{fmt::format("worker {} does not exist: the cluster has {} worker(s)", h.worker, workers_)};
  }
  if (h.layout_fingerprint != layout_fingerprint_) {
    throw Refusal{fmt::format("worker {} computed parameter layout {:016x} but the chief's is {:016x}; "
                              "the model, --ps-chunk-mb or the PS count differ",
                              h.worker, h.layout_fingerprint, layout_fingerprint_)};
  }
}

Refusal Admission::bindRefusal(std::string why) const {
  if (!elastic()) {
    why += "; a synchronous job cannot take a replacement worker mid-run (restart the whole job, e.g. with "
           "tandem launch --max-restarts)";
  }
  return Refusal{std::move(why)};
}

}  // namespace tandem::ps
