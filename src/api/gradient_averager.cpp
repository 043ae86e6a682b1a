// GradientAverager and DistributedOptimizer: the trainer's gradient buckets
// (hooks that all-reduce while backward runs) behind the public API.
#include <fmt/format.h>

#include <optional>

#include "api/backward_passes.hpp"
#include "api/job.hpp"
#include "api/ps_optimizer.hpp"
#include "collective/bucket_reducer.hpp"
#include "core/error.hpp"
#include "core/fnv1a.hpp"
#include "core/wire_dtype.hpp"
#include "tandem/tandem.hpp"
#include "train/gradient_buckets.hpp"

namespace tandem {
namespace {

// Buckets pair floats by position: every rank's parameters must agree.
uint64_t parameterLayout(torch::nn::Module& module) {
  Fnv1a hash;
  for (const auto& p : module.named_parameters()) {
    hash.add(p.key().data(), p.key().size());
    for (int64_t d : p.value().sizes()) hash.addValue(d);
  }
  return hash.value();
}

}  // namespace

struct GradientAverager::Impl {
  std::vector<torch::Tensor> parameters;
  std::unique_ptr<api::BackwardPasses> passes;
  std::unique_ptr<train::GradientBuckets> buckets;  // null with one rank
  std::vector<collective::CommHandle> handles;
  // Shared with the queued sums, which may outlive this averager.
  std::shared_ptr<collective::BucketReducer> reducer;
  double scale = 1.0;  // before the sum
  double post = 1.0;   // after it
  api::Job* job = nullptr;
  uint64_t signature = 0;  // what join()ed ranks serve this averager's steps by
  // What the sums depend on, kept to connect again when an elastic job's
  // members change (the job's communicator and size).
  WireDtype wire = WireDtype::kFloat32;
  bool feedback = false;
  bool average = true;
  double predivide = 1.0;
  std::vector<int64_t> bucket_floats;
  uint64_t generation = 0;  // the job's communicator the reducer sums over
  int process_set = 0;
  api::Group group;  // the ranks whose gradients are averaged

  // The reducer over the job's communicator of the moment, and the scales
  // for its size; a joined rank's zeros go through it too.
  void connect() {
    if (process_set == 0) group = api::wholeJob(*job);
    // Averages divide before the sum (by the workers, or by the predivide
    // factor) and, with a predivide factor, the rest after it.
    scale = !average ? 1.0 : predivide == 1.0 ? 1.0 / group.size : 1.0 / predivide;
    post = average && predivide != 1.0 ? predivide / group.size : 1.0;
    reducer = std::make_shared<collective::BucketReducer>(*group.comm, wire, feedback);
    generation = job->generation;
    if (process_set != 0) return;  // join() serves the whole job's steps only
    std::lock_guard<std::mutex> lock(job->servers_mutex);
    job->zero_gradients[signature] = [reducer = reducer, counts = bucket_floats] {
      for (size_t b = 0; b < counts.size(); ++b) {
        torch::Tensor zeros = torch::zeros({counts[b]});
        reducer->reduce(b, zeros.data_ptr<float>(), static_cast<size_t>(counts[b]));
      }
    };
    job->abandon_step[signature] = [this] { abandonStep(); };
  }

  // Every queued sum has ended (the comm thread is gone): forget them and
  // the backward passes counted, as if the step had not begun.
  void abandonStep() {
    for (auto& handle : handles) {
      try {
        if (handle.done()) handle.wait(Deadline::afterSeconds(0), "an abandoned all-reduce");
      } catch (const std::exception&) {
        // the failure that cut the step short
      }
      handle = {};
    }
    passes->startUpdate();
  }

  ~Impl() {
    if (job && api::current().get() == job) {
      std::lock_guard<std::mutex> lock(job->servers_mutex);
      job->zero_gradients.erase(signature);
      job->abandon_step.erase(signature);
    }
  }
};

GradientAverager::GradientAverager(torch::nn::Module& module, int backward_passes_per_step)
    : GradientAverager(module, [&] {
        AveragerOptions options;
        options.backward_passes_per_step = backward_passes_per_step;
        return options;
      }()) {}

GradientAverager::GradientAverager(torch::nn::Module& module, const AveragerOptions& options)
    : impl_(std::make_unique<Impl>()) {
  api::Job& job = api::requireJob("GradientAverager");
  Impl& s = *impl_;
  if (options.op != ReduceOp::Average && options.op != ReduceOp::Sum) {
    throw InputError("tandem GradientAverager: op must be Average or Sum (Horovod's DistributedOptimizer ops; "
                     "Adasum is not supported)");
  }
  const double predivide = options.gradient_predivide_factor;
  if (!(predivide > 0)) throw InputError("tandem GradientAverager: gradient_predivide_factor must be positive");
  if (predivide != 1.0 && options.op != ReduceOp::Average) {
    throw InputError("tandem GradientAverager: gradient_predivide_factor applies to op Average only");
  }
  s.parameters = module.parameters();
  // Before the buckets' hooks: a pass too many is refused before any send.
  s.passes = std::make_unique<api::BackwardPasses>(s.parameters, options.backward_passes_per_step,
                                                   [&s](int pass, bool last) {
                                                     if (!s.buckets) return;
                                                     // An elastic job connected again since the last step.
                                                     if (pass == 0 && s.job->generation != s.generation) s.connect();
                                                     s.buckets->beginMicroStep(pass, last, s.scale);
                                                   });
  // A rank outside the process set keeps its own gradients, as in Horovod.
  const auto set = job.process_sets.find(options.process_set);
  const bool outside = set != job.process_sets.end() && set->second.rank < 0;
  if (!outside) s.group = api::groupOf(job, options.process_set, "DistributedOptimizer");
  s.process_set = options.process_set;
  if (!outside && s.group.size > 1) {
    const uint64_t layout = parameterLayout(module);
    // Early, named errors. Not in an elastic job, where a rank that joins
    // builds its optimizer while the others are already past theirs (each
    // step's negotiation still compares the signature below).
    if (!job.live) api::requireAgreement(job, s.group, layout, "parameter names or shapes");
    s.wire = options.wire_dtype.value_or(job.options.wire_dtype);
    s.feedback = job.options.error_feedback && s.wire != WireDtype::kFloat32;
    const size_t cap = train::bucketCapBytes(module, options.bucket_mb >= 0 ? options.bucket_mb : job.options.bucket_mb);
    s.average = options.op == ReduceOp::Average;
    s.predivide = predivide;
    Fnv1a settings;
    const std::string text = fmt::format("{}{} cap {} op {} predivide {}", wireDtypeName(s.wire),
                                         s.feedback ? "+feedback" : "", cap, s.average ? "average" : "sum", predivide);
    settings.add(text.data(), text.size());
    if (!job.live) {
      api::requireAgreement(job, s.group, settings.value(),
                            "wire_dtype, error_feedback, bucket size, op or predivide factor");
    }
    s.job = &job;
    s.signature = layout ^ settings.value();
    api::Announcement step;
    step.kind = api::CallKind::kGradients;
    step.signature = s.signature;
    s.buckets = std::make_unique<train::GradientBuckets>(
        module, cap, 0,
        [&s, &job, step](size_t bucket, torch::Tensor flat) {
          auto name = [&] { return fmt::format("DistributedOptimizer bucket {} ({} values)", bucket, flat.numel()); };
          s.handles[bucket] = s.group.thread->submit(api::traced(job, name, [&s, reducer = s.reducer, flat, bucket,
                                                                             group = s.group, step, post = s.post] {
            // Once a step: every rank is in this exchange, or has joined.
            if (bucket == 0) {
              const api::Agreement agreement = api::negotiate(group, step);
              if (!agreement.error.empty()) throw MismatchError("tandem: " + agreement.error);
            }
            s.buckets->awaitOnHost(bucket);
            reducer->reduce(bucket, flat.data_ptr<float>(), static_cast<size_t>(flat.numel()));
            if (post != 1.0) flat.mul_(post);
          }));
        },
        [] {});
    s.handles.resize(s.buckets->size());
    // A rank in join() contributes zeros to each bucket, in order.
    for (size_t b = 0; b < s.buckets->size(); ++b) s.bucket_floats.push_back(static_cast<int64_t>(s.buckets->bucketBytes(b) / 4));
    s.connect();
  }
  s.passes->startUpdate();
}

GradientAverager::~GradientAverager() = default;

void GradientAverager::synchronize() {
  Impl& s = *impl_;
  s.passes->requireComplete("GradientAverager::synchronize");
  if (!s.buckets) return s.passes->markSynchronized();
  api::Job& job = api::requireJob("GradientAverager::synchronize");
  s.buckets->flush();
  for (size_t b = 0; b < s.handles.size(); ++b) {
    s.handles[b].wait(job.deadline(), fmt::format("all-reduce of gradient bucket {}", b));
  }
  s.buckets->exposeGradients();
  s.passes->markSynchronized();
}

bool GradientAverager::pending() const { return impl_->passes->passes() > 0 && !impl_->passes->synchronized(); }

void GradientAverager::zero_grad() {
  Impl& s = *impl_;
  if (pending()) {
    throw InputError("tandem: zero_grad() after backward() but before step() or synchronize(): the gradients are "
                     "being averaged with the other ranks' (Horovod refuses this too)");
  }
  for (auto& p : s.parameters) p.mutable_grad().reset();
  s.passes->startUpdate();
}

struct DistributedOptimizer::Impl {
  torch::optim::Optimizer& optimizer;
  std::optional<GradientAverager> averager;       // AllReduce
  std::unique_ptr<api::PsOptimizer> servers;      // PS modes
  bool local_steps = false;                       // DiLoCo: the optimizer steps here, the servers every round
};


DistributedOptimizer::DistributedOptimizer(torch::optim::Optimizer& optimizer, torch::nn::Module& module,
                                           const DistributedOptions& options)
    : impl_(new Impl{optimizer, std::nullopt, nullptr}) {
  if (options.mode == Mode::AllReduce) {
    if (options.local_steps != 0) throw InputError("tandem: local_steps (DiLoCo) needs parameter servers (PsSync, PsAsync)");
    if (options.push_bits != 0) throw InputError("tandem: push_bits needs parameter servers (PsSync, PsAsync, Ssp)");
    if (options.delay_compensation != 0) {
      throw InputError("tandem: delay_compensation needs parameter servers (PsAsync, Ssp)");
    }
    impl_->averager.emplace(module, options.backward_passes_per_step);
    return;
  }
  if (!usesServers(options.mode)) {
    throw InputError(fmt::format("tandem: DistributedOptimizer runs AllReduce or a parameter-server mode, not {}",
                                 modeName(options.mode)));
  }
  if (options.local_steps > 0 && options.mode == Mode::Ssp) {
    throw InputError("tandem: local_steps (DiLoCo) runs with PsSync or PsAsync, not Ssp");
  }
  api::PsOptimizerOptions ps;
  ps.mode = options.mode;
  ps.staleness = options.staleness;
  ps.backward_passes_per_step = options.backward_passes_per_step;
  ps.optimizer = api::serverOptimizerOf(optimizer);
  ps.lr = api::learningRateOf(optimizer);
  ps.keywords = {{"ps_chunk_mb", options.ps_chunk_mb},         {"local_steps", options.local_steps},
                 {"outer_optimizer", options.outer_optimizer}, {"outer_lr", options.outer_lr},
                 {"outer_momentum", options.outer_momentum},   {"push_bits", options.push_bits},
                 {"delay_compensation", options.delay_compensation}};
  impl_->servers = std::make_unique<api::PsOptimizer>(module, ps);
  impl_->local_steps = options.local_steps > 0;
}

DistributedOptimizer::~DistributedOptimizer() = default;

void DistributedOptimizer::zero_grad() {
  if (impl_->averager) return impl_->averager->zero_grad();
  // The rate a scheduler set since the last step applies from this update on.
  impl_->servers->setLearningRate(api::learningRateOf(impl_->optimizer));
  impl_->servers->zeroGrad();
}

void DistributedOptimizer::step() {
  if (impl_->averager) {
    impl_->averager->synchronize();
    impl_->optimizer.step();
    impl_->averager->zero_grad();
    return;
  }
  if (impl_->local_steps) impl_->optimizer.step();
  impl_->servers->step();
  impl_->servers->setLearningRate(api::learningRateOf(impl_->optimizer));
}

void DistributedOptimizer::finish() {
  if (impl_->servers) impl_->servers->finish();
}

}  // namespace tandem
