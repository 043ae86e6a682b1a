// `tandem lab`: an emulated cluster on this machine. Each host is a network
// namespace whose link to a software switch is shaped to the chosen rate;
// ordinary `tandem train` tasks run inside them, placed as asked. Afterwards
// the lab reads each worker's steady steps and each link's bytes, and puts
// them beside the planner's comm-bound optimum and Tandem's predicted path.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/arg_style.hpp"
#include "cli/commands.hpp"
#include "cli/train_flags.hpp"
#include "core/error.hpp"
#include "core/wire_dtype.hpp"
#include "lab/lab_report.hpp"
#include "lab/link_sampler.hpp"
#include "lab/link_timeline.hpp"
#include "lab/placement.hpp"
#include "lab/virtual_network.hpp"
#include "launch/job_secret_file.hpp"
#include "launch/job_progress.hpp"
#include "launch/process_group.hpp"
#include "obs/timeline.hpp"
#include "train/config.hpp"
#include "train/emulated_compute.hpp"

namespace tandem::cli {
namespace {

constexpr double kLabQueueS = 0.05;  // each link's queue, in emulated seconds

namespace fs = std::filesystem;

std::atomic<int> g_lab_signal{0};
void onLabSignal(int signal) { g_lab_signal.store(signal); }

struct LabOptions {
  int hosts = 2;
  int workers_per_host = 1;
  int ps = 0;
  std::string ps_placement = "colocated";
  double link_mbps = 1000;
  double dilation = 1;
  int64_t warmup_steps = 3;
  int64_t measure_steps = 0;  // after the warm-up; 0: to the end
  double grace_s = 10;
  double message_us = 0;
  double apply_gb_s = 0;
  bool json = false;
  bool cleanup = false;
  bool torchrun_env = false;  // workers told only torchrun's variables, not every address
  std::vector<std::string> train_args;
};

// With dilation, the lab runs compute `factor` times slower on links
// `factor` times slower: the profile the tasks read is scaled.
fs::path dilatedProfile(const std::string& path, double factor) {
  std::ifstream in(path);
  auto profile = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!profile.is_object()) throw InputError(fmt::format("{}: not a JSON profile", path));
  for (const char* field : {"forward_ms", "backward_ms"}) {
    if (!profile.contains(field) || !profile[field].is_number()) {
      throw InputError(fmt::format("{}: field '{}' must be a number", path, field));
    }
    profile[field] = profile[field].get<double>() * factor;
  }
  profile["source"] = fmt::format("{} (dilated x{} by tandem lab)", profile.value("source", ""), factor);
  const fs::path out = fs::temp_directory_path() / fmt::format("tandem-lab-{}-profile.json", ::getpid());
  std::ofstream(out) << profile.dump(2) << "\n";
  return out;
}

void replaceFlag(std::vector<std::string>& args, const std::string& flag, const std::string& value) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == flag && i + 1 < args.size()) args[i + 1] = value;
    if (args[i].rfind(flag + "=", 0) == 0) args[i] = flag + "=" + value;
  }
}

nlohmann::json readJson(const fs::path& path) {
  std::ifstream in(path);
  auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) throw Error(fmt::format("{}: missing or not JSON", path.string()));
  return j;
}

// --timeline: each host's link rate as counter tracks beside the tasks'
// spans. A diagnostic, so a failure only warns.
void addLinkTracks(const fs::path& timeline, const std::vector<lab::CounterSample>& samples, double dilation) {
  if (!fs::exists(timeline)) return;
  try {
    obs::appendToTimeline(timeline, lab::linkCounterEvents(samples, dilation));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lab: warning: could not add the link tracks to %s: %s\n", timeline.c_str(), e.what());
  }
}

int runLab(LabOptions o, const Environment& env) {
  const lab::AdminTools tools = lab::findAdminTools(env);
  if (o.cleanup) {
    const int removed = lab::removeStaleLabs(tools);
    std::fprintf(stderr, "lab: removed %d namespace(s) of labs whose owner is gone\n", removed);
    return 0;
  }
  if (!o.train_args.empty() && o.train_args.front() == "train") o.train_args.erase(o.train_args.begin());
  // The tasks' run config, parsed as they will parse it.
  const ParsedTrainArgs train = parseTrainArgs(o.train_args);
  for (const char* flag : {"--worker-hosts", "--ps-hosts", "--job-name", "--task-index", "--coordinator"}) {
    if (hasFlag(o.train_args, flag)) {
      throw InputError(fmt::format("{}: the lab sets it for its tasks; remove it from the train arguments", flag));
    }
  }
  if (train.given.contains("/log_every_steps")) {
    throw InputError("--log-every: the lab sets it for its tasks; remove it from the train arguments");
  }
  if (o.ps_placement != "colocated" && o.ps_placement != "dedicated") {
    throw InputError(fmt::format("--ps-placement: '{}' is not colocated or dedicated", o.ps_placement));
  }
  if (o.torchrun_env && o.ps > 0) {
    throw InputError("--torchrun-env: torchrun's variables describe all-reduce workers only; use --ps 0");
  }
  if (!(o.link_mbps > 0)) throw InputError(fmt::format("--link-mbps: must be positive, got {}", o.link_mbps));
  if (!(o.dilation >= 1)) throw InputError(fmt::format("--dilation: must be >= 1, got {}", o.dilation));
  if (o.warmup_steps < 0) throw InputError(fmt::format("--warmup-steps: must be >= 0, got {}", o.warmup_steps));
  if (o.measure_steps < 0) throw InputError(fmt::format("--measure-steps: must be >= 0, got {}", o.measure_steps));
  const std::optional<std::string> profile_path =
      train.config.emulate_compute.empty() ? std::nullopt : std::optional(train.config.emulate_compute);
  if (o.dilation != 1 && !profile_path) {
    throw InputError("--dilation: only emulated compute can be slowed down with the links; add --emulate-compute "
                     "PROFILE to the train arguments");
  }
  const lab::Placement placement =
      lab::place({o.hosts, o.workers_per_host, o.ps, o.ps_placement == "dedicated"});
  if (const std::string missing = lab::missingLabPrivileges(); !missing.empty()) throw Error(missing);
  if (const int stale = lab::removeStaleLabs(tools); stale > 0) {
    std::fprintf(stderr, "lab: removed %d namespace(s) left by a lab whose owner is gone\n", stale);
  }

  std::vector<std::string> common = o.train_args;
  train::TrainConfig run = train.config;  // as the tasks run it
  if (!train.given.contains("/out_dir")) {
    run.out_dir = "runs/lab";
    common.insert(common.end(), {"--out", run.out_dir});
  }
  const std::string& out = run.out_dir;
  // The scaled profile lives as long as the run, whichever way it ends.
  struct RemovedAtExit {
    std::optional<fs::path> path;
    ~RemovedAtExit() {
      std::error_code ec;
      if (path) fs::remove(*path, ec);
    }
  } dilated;
  std::optional<train::ComputeProfile> profile;
  if (profile_path) {
    profile = train::loadComputeProfile(*profile_path);
    if (o.dilation != 1) {
      dilated.path = dilatedProfile(*profile_path, o.dilation);
      replaceFlag(common, "--emulate-compute", dilated.path->string());
    }
  }
  // Every task shares this machine's cores, whatever host it plays.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int tasks = static_cast<int>(placement.workers.size() + placement.servers.size());
  if (!train.given.contains("/threads")) common.insert(common.end(), {"--threads", std::to_string(std::max(1, cores / tasks))});
  if (o.ps > 0 && !train.given.contains("/distributed/ps_threads")) common.insert(common.end(), {"--ps-threads", "1"});
  common.insert(common.end(), {"--log-every", "1"});
  // Dilated links are dilation times slower, so is every wait on them: at
  // dilation 16 the default 5 s of heartbeat silence, 0.3 s emulated, lost
  // healthy servers behind a TCP retransmission.
  if (o.dilation != 1 && !train.given.contains("/distributed/heartbeat_timeout_s")) {
    const double heartbeat_s = std::min(3600.0, train::DistributedConfig{}.heartbeat_timeout_s * o.dilation);
    common.insert(common.end(), {"--heartbeat-timeout", fmt::format("{}", heartbeat_s)});
  }
  const bool job_progress = !hasFlag(common, "--progress");
  if (job_progress) common.insert(common.end(), {"--progress", "records"});

  // Caught from here on, so that a stop removes the lab.
  for (int s : {SIGINT, SIGTERM, SIGHUP}) std::signal(s, onLabSignal);
  const double lab_bits_per_s = o.link_mbps * 1e6 / o.dilation;
  // The queue holds 50 ms of the emulated link whatever the dilation, so
  // that a dilated run drops what the cluster would (at a fixed 100 ms, 4 x
  // 2 flat PS workers overflowed it at dilation 4 but not at 2).
  lab::VirtualNetwork network(placement.hosts, {.bits_per_s = lab_bits_per_s, .queue_s = kLabQueueS * o.dilation}, tools);
  auto address = [&network](int host) { return network.address(host); };
  const std::string worker_hosts = lab::hostList(placement.workers, address);
  const std::string ps_hosts = lab::hostList(placement.servers, address);
  if (o.ps > 0) common.insert(common.end(), {"--ps-hosts", ps_hosts});
  std::fprintf(stderr, "lab: %d host(s) in network namespaces, links %g Mbit/s (%g emulated, dilation %g); workers "
               "at %s%s%s\n",
               placement.hosts, lab_bits_per_s / 1e6, o.link_mbps, o.dilation, worker_hosts.c_str(),
               o.ps > 0 ? ", servers at " : "", ps_hosts.c_str());

  launch::JobProgress progress(/*live=*/::isatty(STDOUT_FILENO) == 1);
  const launch::JobSecretFile secret(o.train_args, env);
  launch::ProcessGroup group(secret.forTasks(env));
  if (job_progress) {
    group.setLineHook([&progress](const std::string& child, std::string_view line) {
      return progress.onLine(child, line);
    });
    group.setStatusLine([&progress] { return progress.statusLine(); });
  }
  // Every 5 ms: fine enough for the timeline's link tracks at dilation 1.
  lab::LinkSampler sampler([&network] { return network.counters(); }, 0.005);
  const std::string self = launch::selfExecutable();
  auto start = [&](const lab::PlacedTask& t) {
    launch::ChildSpec child;
    child.name = fmt::format("{} {}", t.job, t.index);
    child.argv = network.execPrefix(t.host);
    child.argv.insert(child.argv.end(), {self, "train"});
    child.argv.insert(child.argv.end(), common.begin(), common.end());
    if (o.torchrun_env) {
      // As torchrun on each host: ranks, sizes and worker 0's address only.
      const auto& chief = placement.workers.front();
      child.extra_env = {{"RANK", std::to_string(t.index)},
                         {"WORLD_SIZE", std::to_string(placement.workers.size())},
                         {"LOCAL_RANK", std::to_string(t.index % o.workers_per_host)},
                         {"LOCAL_WORLD_SIZE", std::to_string(o.workers_per_host)},
                         {"MASTER_ADDR", network.address(chief.host)},
                         {"MASTER_PORT", std::to_string(chief.port)}};
    } else {
      child.argv.insert(child.argv.end(), {"--worker-hosts", worker_hosts, "--job-name", t.job, "--task-index",
                                           std::to_string(t.index)});
    }
    group.start(child);
  };
  for (const auto& t : placement.servers) start(t);
  for (const auto& t : placement.workers) start(t);
  bool forwarded = false;
  const auto result = group.wait(std::chrono::milliseconds(static_cast<int64_t>(o.grace_s * 1000)), [&forwarded] {
    const int signal = g_lab_signal.exchange(0);
    if (signal > 0) forwarded = true;
    return signal;
  });
  sampler.stop();
  if (!result.ok) {
    std::fprintf(stderr, "lab: %s; the other tasks were stopped and the lab removed\n", result.first_failure.c_str());
    return forwarded ? 130 : 1;
  }
  std::vector<lab::LinkDrops> drops;  // the whole run's, warm-up included
  try {
    drops = network.droppedPackets();
  } catch (const Error& e) {
    std::fprintf(stderr, "lab: warning: %s\n", e.what());
  }
  mergeTaskTimelines(run);
  if (run.timeline) {
    addLinkTracks(fs::path(out) / "timeline.json", sampler.samples(), o.dilation);
  }

  // The steady steps of every worker, and the links over worker 0's window.
  std::vector<lab::WorkerResult> workers;
  nlohmann::json chief_summary;
  for (const auto& t : placement.workers) {
    const fs::path dir = t.index == 0 ? fs::path(out) : fs::path(out) / "workers" / fmt::format("worker-{}", t.index);
    const nlohmann::json summary = readJson(dir / "summary.json");
    if (t.index == 0) chief_summary = summary;
    workers.push_back({fmt::format("worker {}", t.index), lab::steadyWindow(dir / "metrics.jsonl", o.warmup_steps, o.measure_steps),
                       summary.value("batch_size_per_worker", int64_t{0}) * summary.value("accumulate", int64_t{1})});
  }
  lab::LabSetup setup;
  setup.worker_hosts = o.hosts;
  setup.workers_per_host = o.workers_per_host;
  setup.servers = o.ps;
  setup.dedicated_servers = o.ps_placement == "dedicated";
  setup.link_bits_per_s = o.link_mbps * 1e6;
  setup.dilation = o.dilation;
  // --wire-dtype: the same floats in fewer bytes (as tandem plan counts them).
  const WireDtype wire_dtype = train.config.distributed.wire_dtype;
  const double wire = static_cast<double>(wireBytes(wire_dtype)) / 4;
  setup.model_bytes = 4.0 * wire * chief_summary.value("parameters", 0.0);
  const train::DistributedConfig& d = train.config.distributed;
  setup.local_steps = std::max<int64_t>(1, d.local_steps);  // 0: every step exchanges
  setup.fragments = d.fragments;
  setup.fragment_delay = d.fragment_delay;
  // As the chief ran it (--staleness 0 is ps-sync, for one).
  setup.mode = parseMode(chief_summary.value("mode", std::string()), "the chief's summary.json");
  // The layout as the workers built it (their summary's "strategy"):
  // hierarchical or not, and the PS chunks they cut.
  const nlohmann::json strategy = chief_summary.value("strategy", nlohmann::json::object());
  setup.hierarchical = strategy.value("hierarchical", false);
  setup.priority = strategy.value("priority", false);
  const double chunks = strategy.value("chunks", 0.0);
  const double bucket_cap = strategy.value("bucket_cap_bytes", 0.0);  // 0: one worker, no buckets
  setup.group_bytes = o.ps > 0 && chunks > 0 ? setup.model_bytes / chunks
                      : bucket_cap > 0       ? bucket_cap * wire
                                             : std::max(setup.model_bytes, 1.0);
  // Measured on this machine in real time: in the emulated cluster's time
  // a fixed cost shrinks with the dilation; a rate grows with it.
  setup.message_s = o.message_us / 1e6 / o.dilation;
  setup.apply_bytes_per_s = o.apply_gb_s * 1e9 * o.dilation * wire;
  if (profile) {
    setup.forward_s = profile->forward_ms / 1e3;
    setup.backward_s = profile->backward_ms / 1e3;
  } else {
    // Real compute: the measured forward+backward, split as the profiles are (1/3, 2/3).
    const double fb = workers.front().window.breakdown.value("forward_backward", 0.0);
    setup.forward_s = fb / 3;
    setup.backward_s = fb * 2 / 3;
  }
  const auto& window = workers.front().window;
  nlohmann::json report = lab::labReport(setup, workers, sampler.at(window.begin_time), sampler.at(window.end_time));
  for (size_t h = 0; h < drops.size() && h < report["links"].size(); ++h) {
    report["links"][h]["run_dropped_packets_sent"] = drops[h].sent_packets;
    report["links"][h]["run_dropped_packets_received"] = drops[h].received_packets;
  }
  // The window the rates cover, on the timeline's clock.
  report["measured"]["window_unix_s"] = {window.begin_time, window.end_time};
  std::ofstream(fs::path(out) / "lab.json") << report.dump(2) << "\n";
  if (o.json) {
    fmt::print("{}\n", report.dump(2));
  } else {
    fmt::print("{}", lab::labTable(report));
  }
  std::fprintf(stderr, "lab: report in %s; namespaces removed\n", (fs::path(out) / "lab.json").c_str());
  return 0;
}

}  // namespace

Command addLabCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "lab", "Run `tandem train` on emulated hosts (network namespaces with shaped links) and compare the measured "
             "step with the planner (needs root)");
  auto o = std::make_shared<LabOptions>();
  cmd->add_option("--hosts", o->hosts, "hosts running workers")->capture_default_str();
  cmd->add_option("--workers-per-host", o->workers_per_host, "workers on each of those hosts")->capture_default_str();
  cmd->add_option("--ps", o->ps, "parameter servers (0: all-reduce)")->capture_default_str();
  cmd->add_option("--ps-placement", o->ps_placement,
                  "colocated (one on each of the first worker hosts) or dedicated (hosts of their own)")
      ->capture_default_str();
  cmd->add_option("--link-mbps", o->link_mbps, "each host's link, Mbit/s each way (emulated, before dilation)")
      ->capture_default_str();
  cmd->add_option("--dilation", o->dilation,
                  "run links this many times slower and emulated compute this many times longer, so faster links "
                  "than this machine can carry keep their ratios; reported times are divided back")
      ->capture_default_str();
  cmd->add_option("--warmup-steps", o->warmup_steps, "steps each worker takes before the measurement starts")
      ->capture_default_str();
  cmd->add_option("--measure-steps", o->measure_steps,
                  "steps measured after the warm-up (0: to the run's end)")
      ->capture_default_str();
  cmd->add_option("--grace", o->grace_s, "seconds between SIGTERM and SIGKILL when stopping the tasks")
      ->capture_default_str();
  cmd->add_option("--message-us", o->message_us,
                  "for the prediction: this machine's fixed cost per bucket all-reduce or chunk message, "
                  "microseconds (tandem bench allreduce --workers N --sizes 4K)")
      ->capture_default_str();
  cmd->add_option("--apply-gb-s", o->apply_gb_s, "for the prediction: a server's apply rate on this machine, GB/s "
                                                 "(tandem bench ps-apply); 0: free")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "print the report as JSON instead of tables");
  cmd->add_flag("--torchrun-env", o->torchrun_env,
                "start all-reduce workers as torchrun does (RANK, WORLD_SIZE, MASTER_ADDR, ...), not with every "
                "worker's address");
  cmd->add_flag("--cleanup", o->cleanup, "remove what labs killed before cleaning up left behind, and exit");
  cmd->add_option("train_args", o->train_args, "after --: arguments for `tandem train`");
  cmd->footer("Example:\n  sudo tandem lab --hosts 2 --link-mbps 100 -- --model resnet20 --dataset synthetic "
              "--synthetic-shape 3x32x32 --emulate-compute my-gpu.json --max-steps 30 --out runs/lab --overwrite");
  return {cmd, [o](const Environment& env) { return runLab(*o, env); }};
}

}  // namespace tandem::cli
