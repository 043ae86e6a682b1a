// `tandem plan`: the comm-bound optimum of a layout on a cluster, for a
// range of host counts (plan/comm_model.hpp).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "collective/bucket_size.hpp"
#include "core/error.hpp"
#include "core/wire_dtype.hpp"
#include "models/registry.hpp"
#include "plan/comm_model.hpp"
#include "ps/key_layout.hpp"
#include "plan/recommend.hpp"
#include "plan/tf1_ps_model.hpp"
#include "train/emulated_compute.hpp"

namespace tandem::cli {
namespace {

struct PlanFlags {
  int64_t local_steps = 1;  // DiLoCo: steps per exchange of the model
  std::string model;
  double model_mb = 0;
  std::string profile;
  double forward_ms = 0;
  double backward_ms = 0;
  int64_t batch_size = 1;
  std::vector<int> hosts = {1, 2, 4, 8};
  std::vector<int> gpus;  // instead of --hosts: total workers, workers_per_host to a host
  int workers_per_host = 1;
  double link_gbps = 10;
  double latency_us = 50;
  std::string layout = "allreduce";
  int servers = 0;  // 0: one per host (colocated) or 1 (dedicated)
  double group_mb = 0;  // Tandem's bucket or chunk (0: from the model, as tandem train)
  double message_us = 0;  // Tandem's fixed cost per bucket or chunk message (tandem bench allreduce)
  double apply_gb_s = 0;  // a server's apply rate (tandem bench ps-apply); 0: free
  bool async = false;
  double tf1_worker_mb_s = 122;  // fitted to the users' 1-GPU point (docs/planner.md)
  double tf1_ps_mb_s = 372;      // fitted to their 16-GPU point
  double tf1_message_us = 0;
  std::string tf1_placement = "round-robin";
  bool recommend = false;
  std::string wire_dtype = "fp32";
  std::string priority = "on";  // sync flat PS layouts: the next forward overlaps the exchange
  bool json = false;
};

// A built-in model at its default input, built once for its sizes.
models::ModelPtr builtInModel(const std::string& name) {
  for (const auto& info : models::listModels()) {
    if (info.name == name) return models::createModel(name, info.default_input);
  }
  models::requireKnownModel(name);  // names the known ones
  throw InputError(fmt::format("--model: '{}' is not a built-in model", name));
}

// TensorFlow 1's variables in creation order, as TF-slim builds them: a
// batch norm holds beta, moving mean and moving variance (no gamma), every
// other layer its own parameters.
std::vector<double> tf1Variables(const torch::nn::Module& model) {
  std::vector<double> bytes;
  for (const auto& m : model.modules(/*include_self=*/false)) {
    if (const auto* bn = m->as<torch::nn::BatchNorm2dImpl>()) {
      for (int i = 0; i < 3; ++i) bytes.push_back(4.0 * static_cast<double>(bn->options.num_features()));
      continue;
    }
    for (const auto& p : m->named_parameters(/*recurse=*/false)) bytes.push_back(4.0 * static_cast<double>(p.value().numel()));
  }
  return bytes;
}

// The (hosts, workers per host) of each row: --gpus fills hosts of
// --workers-per-host in turn (fewer GPUs than that: one host with them all).
std::vector<std::pair<int, int>> configurations(const PlanFlags& f) {
  std::vector<std::pair<int, int>> out;
  if (f.gpus.empty()) {
    for (int h : f.hosts) out.emplace_back(h, f.workers_per_host);
    return out;
  }
  for (int n : f.gpus) {
    if (n < 1) throw InputError(fmt::format("--gpus: counts must be >= 1, got {}", n));
    const int hosts = (n + f.workers_per_host - 1) / f.workers_per_host;
    if (n % hosts != 0) {
      throw InputError(fmt::format("--gpus: {} GPUs do not fill {} hosts of {} evenly", n, hosts, f.workers_per_host));
    }
    out.emplace_back(hosts, n / hosts);
  }
  return out;
}

double modelBytes(const PlanFlags& f, const models::ModelPtr& model) {
  return model ? 4.0 * static_cast<double>(models::countParameters(*model)) : f.model_mb * 1e6;
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
  if (f.model.empty() == (f.model_mb <= 0)) throw InputError("give exactly one of --model NAME and --model-mb MB");
  const models::ModelPtr model = f.model.empty() ? nullptr : builtInModel(f.model);
  plan::Workload work{f.forward_ms / 1e3, f.backward_ms / 1e3, modelBytes(f, model), f.batch_size};
  const bool tf1 = f.layout == "tf1-ps";
  const plan::Algorithm algorithm = tf1 ? plan::Algorithm::kPsColocated : plan::parseAlgorithm(f.layout);
  if (tf1 && !model) throw InputError("--layout tf1-ps: needs --model (whole variables are placed)");
  const std::vector<double> variables = tf1 ? tf1Variables(*model) : std::vector<double>{};
  // Tandem's defaults: buckets and PS chunks sized from the model (and,
  // for PS chunks, the servers).
  const auto model_floats = static_cast<int64_t>(work.model_bytes / 4);
  auto groupMb = [&](int servers) {
    if (f.group_mb > 0) return f.group_mb;
    const int64_t floats = plan::isAllReduce(algorithm) ? collective::autoBucketFloats(model_floats)
                                                        : ps::autoPsChunkFloats(model_floats, servers);
    return static_cast<double>(floats) * 4 / (1024 * 1024);
  };
  // A 16-bit wire carries half the bytes of the same floats: the model, its
  // buckets or chunks, and (so that applying a float costs the same) the
  // apply rate counted in wire bytes.
  const double wire = static_cast<double>(wireBytes(parseWireDtype(f.wire_dtype))) / 4;
  if (tf1 && wire != 1) throw InputError("--wire-dtype: tf1-ps models TensorFlow 1's float32 wire only");
  work.model_bytes *= wire;
  if (f.local_steps < 1) throw InputError(fmt::format("--local-steps: must be >= 1, got {}", f.local_steps));
  if (f.local_steps > 1 && (tf1 || f.recommend)) {
    throw InputError("--local-steps: DiLoCo is predicted for Tandem's own layouts, without --recommend or tf1-ps");
  }
  // DiLoCo: each exchange predicted alone, then spread over its steps.
  const bool diloco = f.local_steps > 1;
  plan::Workload exchanged = work;
  if (diloco) exchanged.forward_s = exchanged.backward_s = 0;
  auto perStep = [&](const plan::Prediction& p, const plan::Cluster& cluster) {
    return diloco ? plan::withLocalSteps(p, work, cluster, f.local_steps) : p;
  };
  nlohmann::json rows = nlohmann::json::array();
  if (!f.json) {
    fmt::print("{} ({:.1f} MB), forward {} ms + backward {} ms, {} Gbit/s, {} us latency, {}{}\n",
               f.model.empty() ? "model" : f.model, work.model_bytes / 1e6, f.forward_ms, f.backward_ms,
               f.link_gbps, f.latency_us, f.layout,
               diloco ? fmt::format(", DiLoCo: one exchange per {} steps", f.local_steps) : "");
    fmt::print("{:>5} {:>7} {:>8} {:>12} {:>10} {:>10} {:>9} {:>11}  {}\n", "hosts", "workers", "servers",
               "opt. MB/step", "optimum ms", "step ms", "effic.", "samples/s", "bound by");
  }
  for (const auto& [hosts, per_host] : configurations(f)) {
    plan::Cluster cluster{hosts, per_host, f.link_gbps * 1e9 / 8, f.latency_us / 1e6};
    const bool colocated =
        algorithm == plan::Algorithm::kPsColocated || algorithm == plan::Algorithm::kHierPsColocated;
    plan::Layout layout{algorithm, tf1 ? hosts : f.servers > 0 ? f.servers : (colocated ? hosts : 1)};
    const plan::Prediction optimum = perStep(plan::predict(exchanged, cluster, layout), cluster);
    nlohmann::json row = {{"hosts", hosts}, {"workers", cluster.workers()},
                          {"servers", plan::isAllReduce(algorithm) ? 0 : layout.servers},
                          {"busiest_link_mb_per_step",
                           std::max(optimum.load.worker_host_bytes, optimum.load.server_host_bytes) / 1e6},
                          {"comm_ms", optimum.comm_s * 1e3}, {"optimum_step_ms", optimum.step_s * 1e3},
                          {"optimum_efficiency", optimum.efficiency}};
    if (tf1) {
      const plan::Tf1PsPrediction p = plan::predictTf1Ps(work, cluster, variables,
                                                           {f.tf1_worker_mb_s * 1e6, f.tf1_ps_mb_s * 1e6,
                                                            f.tf1_message_us / 1e6,
                                                            f.tf1_placement == "greedy"
                                                                ? plan::VariablePlacement::kGreedyBySize
                                                                : plan::VariablePlacement::kRoundRobin});
      row.update({{"step_ms", p.step_s * 1e3}, {"efficiency", p.efficiency}, {"samples_per_sec", p.samples_per_s},
                  {"bottleneck", p.bottleneck}, {"busiest_server_share", p.busiest_server_share}});
    } else {
      // As tandem train: hierarchical hosts share the pulled model in one piece.
      const bool priority = f.priority == "on" && (algorithm == plan::Algorithm::kPsColocated ||
                                                   algorithm == plan::Algorithm::kPsDedicated);
      const plan::Prediction p = perStep(
          plan::predictTandem(exchanged, cluster, layout,
                              {groupMb(layout.servers) * 1024 * 1024 * wire, f.apply_gb_s * 1e9 * wire,
                               f.message_us / 1e6, f.async, priority}),
          cluster);
      row.update({{"step_ms", p.step_s * 1e3}, {"efficiency", p.efficiency}, {"samples_per_sec", p.samples_per_s},
                  {"bottleneck", p.bottleneck}});
    }
    if (f.recommend) {
      const plan::Recommendation r =
          plan::recommend(work, cluster,
                          {0, f.apply_gb_s * 1e9 * wire, f.message_us / 1e6, f.async, f.priority == "on"});
      row["recommended"] = {{"layout", plan::algorithmName(r.layout.algorithm)},
                            {"servers", r.layout.servers},
                            {"group_mb", r.group_bytes / wire / (1024 * 1024)},  // as --bucket-mb takes it
                            {"step_ms", r.prediction.step_s * 1e3},
                            {"efficiency", r.prediction.efficiency},
                            {"samples_per_sec", r.prediction.samples_per_s}};
    }
    if (!f.json) {
      fmt::print("{:>5} {:>7} {:>8} {:>12.1f} {:>10.2f} {:>10.2f} {:>8.1f}% {:>11.1f}  {}\n", hosts,
                 cluster.workers(), row["servers"].get<int>(), row["busiest_link_mb_per_step"].get<double>(),
                 optimum.step_s * 1e3, row["step_ms"].get<double>(), row["efficiency"].get<double>() * 100,
                 row["samples_per_sec"].get<double>(), row["bottleneck"].get<std::string>());
    }
    rows.push_back(std::move(row));
  }
  if (f.recommend && !f.json) {
    fmt::print("recommended (Tandem's layouts and bucket/chunk sizes, most samples/s):\n");
    for (const auto& row : rows) {
      const auto& r = row["recommended"];
      fmt::print("  {:>4} workers: {}{}, {:g} MiB {}: {:.2f} ms, {:.1f}%, {:.1f} samples/s\n",
                 row["workers"].get<int>(), r["layout"].get<std::string>(),
                 r["layout"] == "allreduce" ? "" : fmt::format(" ({} servers)", r["servers"].get<int>()),
                 r["group_mb"].get<double>(), r["layout"] == "allreduce" ? "buckets" : "chunks",
                 r["step_ms"].get<double>(), r["efficiency"].get<double>() * 100,
                 r["samples_per_sec"].get<double>());
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
  cmd->add_option("--gpus", f->gpus, "or total GPU (worker) counts, filling hosts of --workers-per-host")
      ->delimiter(',');
  cmd->add_option("--workers-per-host", f->workers_per_host, "workers (GPUs) on each host")->capture_default_str();
  cmd->add_option("--link-gbps", f->link_gbps, "each host's link, Gbit/s each way")->capture_default_str();
  cmd->add_option("--latency-us", f->latency_us, "one-way latency per message, microseconds")->capture_default_str();
  cmd->add_option("--layout", f->layout,
                  "allreduce, ps-colocated, ps-dedicated, their hierarchical forms hier-allreduce, "
                  "hier-ps-colocated and hier-ps-dedicated, or tf1-ps (TensorFlow 1's layout, docs/planner.md)")
      ->capture_default_str();
  cmd->add_option("--group-mb", f->group_mb, "Tandem's bucket (all-reduce) or chunk (PS) size in MiB (default: as tandem train sizes them from the model)");
  cmd->add_flag("--async", f->async, "asynchronous PS workers");
  cmd->add_option("--message-us", f->message_us,
                  "Tandem's fixed cost per bucket all-reduce or chunk message, microseconds (measure: tandem bench "
                  "allreduce --sizes 4K)")
      ->capture_default_str();
  cmd->add_option("--apply-gb-s", f->apply_gb_s, "a server's optimizer apply rate, GB/s (measure: tandem bench "
                                                 "ps-apply); 0: free")
      ->capture_default_str();
  cmd->add_option("--tf1-worker-mb-s", f->tf1_worker_mb_s, "tf1-ps: one worker's gRPC push+pull stream, MB/s")
      ->capture_default_str();
  cmd->add_option("--tf1-ps-mb-s", f->tf1_ps_mb_s, "tf1-ps: one PS process's throughput (in plus out), MB/s")
      ->capture_default_str();
  cmd->add_option("--tf1-placement", f->tf1_placement,
                  "tf1-ps: round-robin (replica_device_setter) or greedy (least-loaded PS, tf_cnn_benchmarks)")
      ->check(CLI::IsMember({"round-robin", "greedy"}))
      ->capture_default_str();
  cmd->add_option("--tf1-message-us", f->tf1_message_us, "tf1-ps: a PS's cost per variable message, microseconds")
      ->capture_default_str();
  cmd->add_option("--wire-dtype", f->wire_dtype, "fp32, fp16 or bf16: what buckets and chunks travel as (tandem "
                                                 "train --wire-dtype)")->capture_default_str();
  cmd->add_option("--priority", f->priority,
                  "sync PS layouts: on (tandem train's default) lets the next forward overlap the exchange")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--local-steps", f->local_steps,
                  "DiLoCo: steps of compute per exchange of the model (tandem train --local-steps); 1: every step")
      ->capture_default_str();
  cmd->add_option("--servers", f->servers, "parameter servers (default: one per host colocated, 1 dedicated)");
  cmd->add_flag("--recommend", f->recommend,
                "also name the fastest of Tandem's layouts and bucket/chunk sizes for each row");
  cmd->add_flag("--json", f->json, "print JSON instead of a table");
  return {cmd, [f](const Environment&) { return run(*f); }};
}

}  // namespace tandem::cli
