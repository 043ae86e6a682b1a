// `tandem plan`: the comm-bound optimum of a layout on a cluster, for a
// range of host counts (plan/comm_model.hpp).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "models/registry.hpp"
#include "plan/comm_model.hpp"
#include "train/emulated_compute.hpp"

namespace tandem::cli {
namespace {

struct PlanFlags {
  std::string model;
  double model_mb = 0;
  std::string profile;
  double forward_ms = 0;
  double backward_ms = 0;
  int64_t batch_size = 1;
  std::vector<int> hosts = {1, 2, 4, 8};
  int workers_per_host = 1;
  double link_gbps = 10;
  double latency_us = 50;
  std::string layout = "allreduce";
  int servers = 0;  // 0: one per host (colocated) or 1 (dedicated)
  bool json = false;
};

double modelBytes(const PlanFlags& f) {
  if (f.model.empty() == (f.model_mb <= 0)) throw InputError("give exactly one of --model NAME and --model-mb MB");
  if (f.model_mb > 0) return f.model_mb * 1e6;
  for (const auto& info : models::listModels()) {
    if (info.name == f.model) return 4.0 * static_cast<double>(models::countParameters(*models::createModel(f.model, info.default_input)));
  }
  models::requireKnownModel(f.model);  // names the known ones
  throw InputError(fmt::format("--model: '{}' is not a built-in model", f.model));
}

int run(PlanFlags f) {
  if (!f.profile.empty()) {
    // A profile gives the compute, its batch and (unless named) its model.
    const train::ComputeProfile p = train::loadComputeProfile(f.profile);
    f.forward_ms = p.forward_ms;
    f.backward_ms = p.backward_ms;
    f.batch_size = p.batch_size;
    if (f.model.empty() && f.model_mb <= 0) f.model = p.model;
  }
  if (f.forward_ms < 0 || f.backward_ms <= 0) {
    throw InputError("--backward-ms (or --profile) must be positive, --forward-ms >= 0");
  }
  plan::Workload work{f.forward_ms / 1e3, f.backward_ms / 1e3, modelBytes(f), f.batch_size};
  const plan::Algorithm algorithm = plan::parseAlgorithm(f.layout);
  nlohmann::json rows = nlohmann::json::array();
  if (!f.json) {
    fmt::print("{} ({:.1f} MB), forward {} ms + backward {} ms, {} per host at {} Gbit/s, {} us latency, {}\n",
               f.model.empty() ? "model" : f.model, work.model_bytes / 1e6, f.forward_ms, f.backward_ms,
               f.workers_per_host, f.link_gbps, f.latency_us, f.layout);
    fmt::print("{:>5} {:>7} {:>8} {:>12} {:>12} {:>9} {:>9} {:>11}  {}\n", "hosts", "workers", "servers",
               "host MB/step", "comm ms", "step ms", "effic.", "samples/s", "bound by");
  }
  for (int hosts : f.hosts) {
    plan::Cluster cluster{hosts, f.workers_per_host, f.link_gbps * 1e9 / 8, f.latency_us / 1e6};
    plan::Layout layout{algorithm, f.servers > 0 ? f.servers : (algorithm == plan::Algorithm::kPsColocated ? hosts : 1)};
    const plan::Prediction p = plan::predict(work, cluster, layout);
    const double host_mb = std::max(p.load.worker_host_bytes, p.load.server_host_bytes) / 1e6;
    rows.push_back({{"hosts", hosts}, {"workers", cluster.workers()},
                    {"servers", algorithm == plan::Algorithm::kRingAllReduce ? 0 : layout.servers},
                    {"busiest_link_mb_per_step", host_mb}, {"comm_ms", p.comm_s * 1e3}, {"step_ms", p.step_s * 1e3},
                    {"efficiency", p.efficiency}, {"samples_per_sec", p.samples_per_s}, {"bottleneck", p.bottleneck}});
    if (!f.json) {
      fmt::print("{:>5} {:>7} {:>8} {:>12.1f} {:>12.2f} {:>9.2f} {:>8.1f}% {:>11.1f}  {}\n", hosts, cluster.workers(),
                 rows.back()["servers"].get<int>(), host_mb, p.comm_s * 1e3, p.step_s * 1e3, p.efficiency * 100,
                 p.samples_per_s, p.bottleneck);
    }
  }
  if (f.json) fmt::print("{}\n", nlohmann::json({{"layout", f.layout}, {"model_bytes", work.model_bytes},
                                                  {"rows", rows}}).dump(2));
  return 0;
}

}  // namespace

Command addPlanCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "plan", "Predict the comm-bound optimum step time, scaling efficiency and bottleneck of a layout on a cluster");
  auto f = std::make_shared<PlanFlags>();
  cmd->add_option("--model", f->model, "a built-in model: its parameters are the bytes exchanged");
  cmd->add_option("--model-mb", f->model_mb, "or the bytes exchanged per step, in MB");
  cmd->add_option("--forward-ms", f->forward_ms, "forward time per step on one worker")->capture_default_str();
  cmd->add_option("--backward-ms", f->backward_ms, "backward time per step on one worker");
  cmd->add_option("--profile", f->profile, "a GPU profile (profiles/*.json): its times, batch and model");
  cmd->add_option("--batch-size", f->batch_size, "samples per worker per step")->capture_default_str();
  cmd->add_option("--hosts", f->hosts, "host counts to predict, comma-separated")->delimiter(',')->capture_default_str();
  cmd->add_option("--workers-per-host", f->workers_per_host, "workers (GPUs) on each host")->capture_default_str();
  cmd->add_option("--link-gbps", f->link_gbps, "each host's link, Gbit/s each way")->capture_default_str();
  cmd->add_option("--latency-us", f->latency_us, "one-way latency per message, microseconds")->capture_default_str();
  cmd->add_option("--layout", f->layout, "allreduce, ps-colocated or ps-dedicated")->capture_default_str();
  cmd->add_option("--servers", f->servers, "parameter servers (default: one per host colocated, 1 dedicated)");
  cmd->add_flag("--json", f->json, "print JSON instead of a table");
  return {cmd, [f] { return run(*f); }};
}

}  // namespace tandem::cli
