#include "cli/train_flags.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/error.hpp"
#include "cli/arg_style.hpp"
#include "core/logging.hpp"
#include "train/checkpoint_format.hpp"
#include "train/run_directory.hpp"
#include "train/train_options.hpp"

namespace tandem::cli {
namespace {

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
  // With the defaults of fields added since it was saved.
  const nlohmann::json stored = train::toJson(train::trainConfigFromJson(train::readCheckpointFile(checkpoint).meta.config));
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
  const Mode mode = !spec                    ? Mode::Standalone
                            : spec->numServers() > 0 ? train::psModeOf(config.distributed)
                                                     : Mode::AllReduce;
  for (const auto& entry : given) train::requireApplies(train::trainOption(entry.first), mode);
  if (given.contains("/distributed/local_steps") && config.distributed.local_steps < 1) {
    throw InputError(fmt::format("--local-steps: must be >= 1 (the steps each worker takes between the servers' "
                                 "outer updates), got {}",
                                 config.distributed.local_steps));
  }
  for (const char* outer : {"/distributed/outer_optimizer", "/distributed/outer_lr", "/distributed/outer_momentum",
                            "/distributed/fragments", "/distributed/fragment_delay", "/distributed/fragment_mix"}) {
    if (given.contains(outer) && config.distributed.local_steps == 0) {
      throw InputError(fmt::format("{}: only applies with --local-steps H (DiLoCo)", train::trainOption(outer).name()));
    }
  }
  if (given.contains("/max_steps") && config.max_steps <= 0) {
    throw InputError(fmt::format("--max-steps: must be >= 1, got {} (leave it out to train for --epochs)",
                                 config.max_steps));
  }
}

}  // namespace

TrainFlags addTrainFlags(CLI::App& cmd) {
  TrainFlags flags{.config = std::make_shared<train::TrainConfig>(),
                   .given = std::make_shared<GivenValues>(),
                   .cluster = std::make_shared<cluster::ClusterFlags>(),
                   .secret_file = std::make_shared<std::string>(),
                   .insecure = std::make_shared<bool>(false),
                   .progress = std::make_shared<std::string>("auto")};
  train::TrainConfig& c = *flags.config;
  // The run-config options, declared once (train/train_options.hpp). Their
  // texts are kept as given, by field, and applied over the defaults (or a
  // checkpoint's flags) once every flag is read.
  const std::shared_ptr<GivenValues>& given = flags.given;
  const nlohmann::json defaults = train::toJson(train::TrainConfig{});
  for (const train::TrainOption& option : train::trainOptions()) {
    const nlohmann::json& value = defaults.at(nlohmann::json::json_pointer(option.field));
    CLI::Option* added = nullptr;
    if (value.is_boolean()) {
      added = cmd.add_flag_callback(option.flags, [given, &option] { (*given)[option.field] = {}; }, option.help);
    } else {
      added = cmd.add_option_function<std::vector<std::string>>(
          option.flags, [given, &option](const std::vector<std::string>& texts) { (*given)[option.field] = texts; },
          option.help);
      if (option.list == train::TrainOption::List::kNone) added->expected(1);
      added->type_name(typeName(option, value));
      if (option.show_default) added->default_str(defaultText(value));
    }
    if (!option.group.empty()) added->group(option.group);
  }
  cmd.get_option("--max-steps")->excludes(cmd.get_option("--epochs"));
  cmd.add_option("--resume", c.resume_from,
                  "continue the exact trajectory from this checkpoint; its run's flags are the defaults");
  cmd.add_flag("--overwrite", c.overwrite, "clear --out first, even if it holds another run (never resume from it)");
  cluster::ClusterFlags& f = *flags.cluster;
  const char* cluster_group = "Cluster";
  cmd.add_option("--worker-hosts", f.worker_hosts, "comma-separated host:port of every worker; worker 0 coordinates")
      ->group(cluster_group);
  cmd.add_option("--ps-hosts", f.ps_hosts, "comma-separated host:port of every parameter server")->group(cluster_group);
  cmd.add_option("--job-name", f.job_name, "this task's job: worker or ps")->group(cluster_group);
  cmd.add_option("--task-index,--task-id", f.task_index, "this task's index within its job")->group(cluster_group);
  cmd.add_option("--coordinator", f.coordinator, "host:port of worker 0's store (needed under mpirun and srun)")
      ->group(cluster_group);
  cmd.add_option("--ps", f.ps_tasks,
                 "under srun, mpirun or torchrun: the last K of the step's tasks serve parameters (task 0 stays "
                 "worker 0, where the coordinator is); each publishes its address in worker 0's store")
      ->check(CLI::NonNegativeNumber)
      ->group(cluster_group);
  cmd.add_flag("--external-coordinator", f.external_coordinator,
               "another process serves the store at --coordinator (tandem launch does, for a job with "
               "--min-workers, so that worker 0 may die too); worker 0 only uses it")
      ->group(cluster_group);
  const char* security_group = "Security";
  cmd.add_option("--secret-file", *flags.secret_file,
                  "the job secret (tandem secret new FILE): only tasks holding it can reach this job's servers; "
                  "default: $TANDEM_SECRET_FILE, else ~/.config/tandem/job-secret")
      ->group(security_group);
  cmd.add_flag("--insecure", *flags.insecure,
                "let anyone who reaches the job's ports in, unauthenticated and unencrypted")
      ->group(security_group);
  cmd.add_option("--progress", *flags.progress, "auto, live, plain, or records (JSON lines for a launcher)")
      ->check(CLI::IsMember({"auto", "live", "plain", "records"}))
      ->capture_default_str();

  return flags;
}

ParsedTrainArgs parseTrainArgs(const std::vector<std::string>& args) {
  CLI::App app;
  CLI::App& cmd = *app.add_subcommand("train");
  const TrainFlags flags = addTrainFlags(cmd);
  collectUnknownArguments(app);
  std::vector<std::string> words = {"tandem", "train"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<const char*> argv;
  for (const auto& w : words) argv.push_back(w.c_str());
  std::vector<std::string> spelled = normalizeFlagSpelling(static_cast<int>(argv.size()), argv.data());
  std::vector<const char*> normalized;
  for (const auto& w : spelled) normalized.push_back(w.c_str());
  try {
    app.parse(static_cast<int>(normalized.size()), normalized.data());
  } catch (const CLI::ParseError& e) {
    throw InputError(fmt::format("train arguments: {}", e.what()));
  }
  const CLI::App* where = nullptr;
  if (const auto unknown = unknownArguments(app, &where); !unknown.empty()) {
    throw InputError(unknownArgumentsMessage(*where, unknown));
  }
  applyTrainOptions(flags);
  return {*flags.config, *flags.given, *flags.secret_file, *flags.insecure};
}

void applyTrainOptions(const TrainFlags& flags) { applyGivenValues(*flags.config, *flags.given); }

void completeTrainConfig(const TrainFlags& flags, const std::optional<cluster::ClusterSpec>& spec) {
  train::TrainConfig& config = *flags.config;
  rejectIgnoredFlags(*flags.given, spec, config);
  const auto given = [&flags](const char* field, double value) {
    return flags.given->contains(field) ? std::optional<double>(value) : std::nullopt;
  };
  train::applyOptimizerDefaults(config.optimizer, given("/optimizer/momentum", config.optimizer.momentum),
                                given("/optimizer/weight_decay", config.optimizer.weight_decay));
  if (!config.resume_from.empty() && !(spec && spec->role == cluster::Role::kPs)) {
    applyResumeDefaults(config, *flags.given);
  }
}

}  // namespace tandem::cli
