#include "train/strategy_factory.hpp"

#include "train/allreduce_strategy.hpp"
#include "train/cluster_join.hpp"
#include "train/diloco_strategy.hpp"
#include "train/ps_strategy.hpp"

namespace tandem::train {

std::unique_ptr<Strategy> makeStrategy(const std::optional<cluster::ClusterSpec>& spec, const TrainConfig& config,
                                       cluster::JobContext& context, bool joined) {
  if (!spec) return std::make_unique<StandaloneStrategy>();
  if (spec->numServers() > 0 && config.distributed.local_steps > 0) {
    return std::make_unique<DilocoStrategy>(*spec, config, context, joined);
  }
  if (spec->numServers() > 0) {
    if (!joined) noticeJoinByHand(*spec, config.distributed, context);
    return std::make_unique<PsStrategy>(*spec, config, context, joined);
  }
  return std::make_unique<AllReduceStrategy>(*spec, config.distributed, context);
}

}  // namespace tandem::train
