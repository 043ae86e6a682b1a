#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <csignal>
#include <map>
#include <optional>
#include <thread>

#include "cli/commands.hpp"
#include "cluster/cluster_spec.hpp"
#include "cluster/local_address.hpp"
#include "cluster/device_placement.hpp"
#include "cluster/local_share.hpp"
#include "cluster/process_setup.hpp"
#include "core/logging.hpp"
#include "core/error.hpp"
#include "data/dataset.hpp"
#include "obs/progress.hpp"
#include "train/checkpoint.hpp"
#include "train/config.hpp"
#include "train/run_directory.hpp"
#include "cli/ps_task.hpp"
#include "cli/restart_in_place.hpp"
#include "train/strategy_factory.hpp"
#include "train/train_options.hpp"
#include "train/trainer.hpp"
#include "core/stop_request.hpp"
#include "net/job_security.hpp"

namespace tandem::cli {
namespace {

// SIGINT/SIGTERM set the process's stop request (core/stop_request): the
// trainer checks it between steps, so a stopped run still leaves a
// checkpoint and summary behind. A second signal kills.
void onStopSignal(int signal) {
  if (stopFlag().exchange(true)) {
    std::signal(signal, SIG_DFL);
    std::raise(signal);
  }
}

// Each run-config option given on the command line: its texts, by field.
using GivenValues = std::map<std::string, std::vector<std::string>>;

// How --help shows a field's default.
std::string defaultText(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("channels")) {
    return fmt::format("{}x{}x{}", value["channels"].dump(), value["height"].dump(), value["width"].dump());
  }
  if (value.is_array()) {
    std::string text;
    for (const auto& item : value) text += (text.empty() ? "" : ",") + item.dump();
    return text;
  }
  return value.dump();
}

// How --help names what an option takes.
std::string typeName(const train::TrainOption& option, const nlohmann::json& value) {
  if (!option.choices.empty()) return "{" + fmt::format("{}", fmt::join(option.choices, ",")) + "}";
  if (option.list == train::TrainOption::List::kIntegers) return "INT";
  if (option.list == train::TrainOption::List::kNumbers) return "FLOAT";
  if (value.is_object()) return "CxHxW";
  if (value.is_number_integer()) return "INT";
  if (value.is_number_float()) return "FLOAT";
  return "TEXT";
}

// The given options' values over what `config` holds (the defaults).
// --resume, --overwrite and --progress are not run-config fields: kept.
void applyGivenValues(train::TrainConfig& config, const GivenValues& given) {
  nlohmann::json j = train::toJson(config);
  for (const auto& [field, texts] : given) {
    const nlohmann::json::json_pointer pointer(field);
    j[pointer] = train::parseOptionValue(train::trainOption(field), j.at(pointer), texts);
  }
  train::TrainConfig parsed = train::trainConfigFromJson(j);
  parsed.resume_from = config.resume_from;
  parsed.overwrite = config.overwrite;
  parsed.progress = config.progress;
  config = std::move(parsed);
}

// --resume CKPT: the checkpoint's run config is the default for every flag
// not given. A given flag must agree with it where it shapes the trajectory
// (only the base learning rate may change, and that is logged).
void applyResumeDefaults(train::TrainConfig& config, const GivenValues& values) {
  const std::string checkpoint = config.resume_from;
  const nlohmann::json stored = train::LoadedCheckpoint(checkpoint).meta().config;
  std::vector<std::string> given;
  for (const auto& entry : values) given.push_back(entry.first);
  const nlohmann::json flags = train::toJson(config);
  nlohmann::json merged = train::mergeGivenFields(stored, flags, given);
  // --epochs alone means the stored --max-steps no longer applies, and the
  // stored thread count was this host's share then: plan it anew unless given.
  const auto has = [&given](const char* p) { return std::find(given.begin(), given.end(), p) != given.end(); };
  if (has("/epochs") && !has("/max_steps")) merged["max_steps"] = 0;
  if (!has("/threads")) merged["threads"] = 0;
  if (auto d = train::firstTrajectoryDifference(stored, merged, /*allow_lr=*/true)) {
    throw InputError(fmt::format("--resume {}: {} differs: checkpoint has {}, the flags give {}; leave the flag out "
                                 "to keep the checkpoint's value",
                                 checkpoint, d->field, d->stored, d->current));
  }
  const obs::ProgressStyle progress = config.progress;
  const int local_processes = config.local_processes;
  config = train::trainConfigFromJson(merged);
  config.resume_from = checkpoint;
  config.progress = progress;
  config.local_processes = local_processes;
  const double stored_lr = stored.at("optimizer").value("lr", config.optimizer.lr);
  if (stored_lr != config.optimizer.lr) {
    TANDEM_LOG_INFO("--resume: learning rate changed from {} to {}", stored_lr, config.optimizer.lr);
  }
}

// A flag that would change nothing is a mistake the user should hear about
// where it selects behaviour (its declaration says strict).
void rejectIgnoredFlags(const GivenValues& given, const std::optional<cluster::ClusterSpec>& spec,
                        const train::TrainConfig& config) {
  const TrainingMode mode = !spec                    ? TrainingMode::kStandalone
                            : spec->numServers() > 0 ? train::psModeOf(config.distributed)
                                                     : TrainingMode::kAllReduce;
  for (const auto& entry : given) train::requireApplies(train::trainOption(entry.first), mode);
  if (given.contains("/max_steps") && config.max_steps <= 0) {
    throw InputError(fmt::format("--max-steps: must be >= 1, got {} (leave it out to train for --epochs)",
                                 config.max_steps));
  }
}

}  // namespace

Command addTrainCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "train", "Train a model: standalone, or as one task of a cluster (cluster flags, TF_CONFIG, mpirun, srun or "
               "torchrun environment)");
  auto config = std::make_shared<train::TrainConfig>();
  auto& c = *config;
  // The run-config options, declared once (train/train_options.hpp). Their
  // texts are kept as given, by field, and applied over the defaults (or a
  // checkpoint's flags) once every flag is read.
  auto given = std::make_shared<GivenValues>();
  const nlohmann::json defaults = train::toJson(train::TrainConfig{});
  for (const train::TrainOption& option : train::trainOptions()) {
    const nlohmann::json& value = defaults.at(nlohmann::json::json_pointer(option.field));
    CLI::Option* added = nullptr;
    if (value.is_boolean()) {
      added = cmd->add_flag_callback(option.flags, [given, &option] { (*given)[option.field] = {}; }, option.help);
    } else {
      added = cmd->add_option_function<std::vector<std::string>>(
          option.flags, [given, &option](const std::vector<std::string>& texts) { (*given)[option.field] = texts; },
          option.help);
      if (option.list == train::TrainOption::List::kNone) added->expected(1);
      added->type_name(typeName(option, value));
      if (option.show_default) added->default_str(defaultText(value));
    }
    if (!option.group.empty()) added->group(option.group);
  }
  cmd->get_option("--max-steps")->excludes(cmd->get_option("--epochs"));
  cmd->add_option("--resume", c.resume_from,
                  "continue the exact trajectory from this checkpoint; its run's flags are the defaults");
  cmd->add_flag("--overwrite", c.overwrite, "clear --out first, even if it holds another run (never resume from it)");
  auto cluster_flags = std::make_shared<cluster::ClusterFlags>();
  auto& f = *cluster_flags;
  const char* cluster_group = "Cluster";
  cmd->add_option("--worker-hosts", f.worker_hosts, "comma-separated host:port of every worker; worker 0 coordinates")
      ->group(cluster_group);
  cmd->add_option("--ps-hosts", f.ps_hosts, "comma-separated host:port of every parameter server")->group(cluster_group);
  cmd->add_option("--job-name", f.job_name, "this task's job: worker or ps")->group(cluster_group);
  cmd->add_option("--task-index,--task-id", f.task_index, "this task's index within its job")->group(cluster_group);
  cmd->add_option("--coordinator", f.coordinator, "host:port of worker 0's store (needed under mpirun and srun)")
      ->group(cluster_group);
  auto secret_file = std::make_shared<std::string>();
  auto insecure = std::make_shared<bool>(false);
  const char* security_group = "Security";
  cmd->add_option("--secret-file", *secret_file,
                  "the job secret (tandem secret new FILE): only tasks holding it can reach this job's servers; "
                  "default: $TANDEM_SECRET_FILE, else ~/.config/tandem/job-secret")
      ->group(security_group);
  cmd->add_flag("--insecure", *insecure,
                "let anyone who reaches the job's ports in, unauthenticated and unencrypted")
      ->group(security_group);
  auto progress = std::make_shared<std::string>("auto");
  cmd->add_option("--progress", *progress, "auto, live, plain, or records (JSON lines for a launcher)")
      ->check(CLI::IsMember({"auto", "live", "plain", "records"}))
      ->capture_default_str();

  return {cmd, [config, given, progress, cluster_flags, secret_file, insecure] {
    applyGivenValues(*config, *given);
    config->progress = *progress == "records" ? obs::ProgressStyle::kRecords
                       : *progress == "live" || (*progress == "auto" && obs::Progress::stderrIsTerminal())
                           ? obs::ProgressStyle::kLive
                           : obs::ProgressStyle::kPlain;
    std::signal(SIGINT, onStopSignal);
    std::signal(SIGTERM, onStopSignal);
    // Where this process sits, its start (a restart in place says which)
    // and, in a cluster, its security: worked out once here, passed down.
    const cluster::ProcessSetup process =
        cluster::setUpProcess(*cluster_flags, config->threads, cluster::captureEnvironment());
    const std::optional<cluster::ClusterSpec>& spec = process.spec;
    cluster::JobContext context;
    if (spec) context.setSecurity(net::resolveJobSecurity(*secret_file, *insecure));
    rejectIgnoredFlags(*given, spec, *config);
    const auto givenValue = [&given](const char* field, double value) {
      return given->contains(field) ? std::optional<double>(value) : std::nullopt;
    };
    train::applyOptimizerDefaults(config->optimizer, givenValue("/optimizer/momentum", config->optimizer.momentum),
                                  givenValue("/optimizer/weight_decay", config->optimizer.weight_decay));
    if (!config->resume_from.empty() && !(spec && spec->role == cluster::Role::kPs)) {
      applyResumeDefaults(*config, *given);
    }
    if (const std::string& bind = config->distributed.bind; bind == "0.0.0.0" || bind == "::" || bind == "*") {
      TANDEM_LOG_WARN("--bind {}: this task's ports listen on every interface, reachable from any network this "
                      "machine is on",
                      bind);
    }
    config->threads = process.threads.threads;
    config->local_processes = process.threads.local_processes;
    config->local_rank = process.local.rank;
    if (spec && spec->role == cluster::Role::kPs) {
      // A stop signal reaches the workers too; the server keeps serving
      // until they have finished their last step.
      train::validate(*config);
      return runPsTask(*spec, *config, context.security());
    }
    nlohmann::json summary;
    try {
      train::Trainer trainer(*config, train::makeStrategy(spec, *config, context), context, &stopFlag());
      summary = trainer.run();
    } catch (const InputError&) {
      throw;
    } catch (const Interrupted&) {
      throw;
    } catch (const Error& e) {
      // The trainer is gone, and with it this task's ports and connections.
      if (mayRestartInPlace(spec ? &*spec : nullptr, *config, context.start())) {
        restartInPlace(*spec, *config, context.start(), e.what());
      }
      throw;
    }
    // fputs, not fmt::print: a closed stdout (`| head`) is no failure of the run.
    if (summary.at("rank").get<int>() == 0) std::fputs((summary.dump(2) + "\n").c_str(), stdout);
    return summary.at("interrupted").get<bool>() ? 130 : 0;
  }};
}

}  // namespace tandem::cli
