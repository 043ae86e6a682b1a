#include "train/membership_change.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>

namespace tandem::train {

std::string describeChange(const MembershipChange& change, int workers_before, const std::string& lr_text) {
  std::string departed;
  for (const auto& d : change.departed) {
    departed += fmt::format("{}{} ({})", departed.empty() ? "" : ", ",
                            cluster::taskName(cluster::Role::kWorker, d.worker), d.why);
  }
  const std::string joined =
      change.joined.empty() ? "" : fmt::format("; joined: worker {}", fmt::join(change.joined, ", worker "));
  const std::string copied =
      change.source < 0 ? ""
                        : fmt::format("; worker {} copied step {} from worker {}", fmt::join(change.behind, ", worker "),
                                      change.step, change.source);
  return fmt::format("members: {} -> {} worker(s) at step {} (generation {}){}{}{}{}{}", workers_before, change.world,
                     change.step, change.generation, departed.empty() ? "" : "; lost: " + departed, joined, copied,
                     change.redo ? "; the failed step is done again" : "", lr_text);
}

nlohmann::json changeRecord(const MembershipChange& change, int workers_before) {
  std::string failure;
  nlohmann::json departed = nlohmann::json::array();
  for (const auto& d : change.departed) {
    failure += fmt::format("{}{} ({})", failure.empty() ? "" : ", ", cluster::taskName(cluster::Role::kWorker, d.worker),
                           d.why);
    departed.push_back({{"worker", d.worker}, {"why", d.why}});
  }
  // lost_updates: the step kept is the newest any survivor reached, so nothing it holds is undone.
  return {{"kind", "membership"},
          {"time", std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()},
          {"generation", change.generation},
          {"step", change.step},
          {"failure", failure},
          {"departed", departed},
          {"joined", change.joined},
          {"workers_before", workers_before},
          {"workers_after", change.world},
          {"lost_updates", 0},
          {"rolled_back", false},
          {"step_redone", change.redo}};
}

}  // namespace tandem::train
