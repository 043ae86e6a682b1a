// The public API's collectives on any tensor (include/tandem/collectives.hpp).
// Each runs on the job's communication thread, in call order: first the
// ranks' announcements are agreed (api/negotiation.hpp), then the data
// moves through the job's Communicator. Ranks in join() serve the others'
// reductions from the same code (reduceFlat), so both sides make the same
// communicator calls.
#include <fmt/format.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>

#include "api/job.hpp"
#include "collective/communicator.hpp"
#include "core/error.hpp"
#include "core/fnv1a.hpp"
#include "tandem/tandem.hpp"

namespace tandem {

using collective::ElementType;
using collective::Reduction;

struct Work::State {
  collective::CommHandle handle;
  std::vector<torch::Tensor> outputs;  // written by the job before it ends
  std::string what;
  double timeout_s = 0;
};

Work::Work() = default;
Work::~Work() = default;
Work::Work(const Work&) = default;
Work& Work::operator=(const Work&) = default;

// Without peers the work ran in the call and its handle is a default one,
// which is done and waits for nothing.
bool Work::poll() const { return !state_ || state_->handle.done(); }

std::vector<torch::Tensor> Work::wait() {
  if (!state_) return {};
  state_->handle.wait(Deadline::afterSeconds(state_->timeout_s), state_->what);
  return state_->outputs;
}

namespace api {

static_assert(sizeof(Announcement) == 40, "announcements travel as fixed-size records");

std::optional<ElementType> elementTypeOf(at::ScalarType type) {
  switch (type) {
    case at::kByte: return ElementType::kUint8;
    case at::kChar: return ElementType::kInt8;
    case at::kInt: return ElementType::kInt32;
    case at::kLong: return ElementType::kInt64;
    case at::kHalf: return ElementType::kFloat16;
    case at::kBFloat16: return ElementType::kBfloat16;
    case at::kFloat: return ElementType::kFloat32;
    case at::kDouble: return ElementType::kFloat64;
    case at::kShort: return ElementType::kInt16;
    default: return std::nullopt;
  }
}

at::ScalarType scalarTypeOf(int32_t element_type) {
  static const at::ScalarType types[] = {at::kByte, at::kChar,     at::kInt,   at::kLong, at::kHalf,
                                         at::kBFloat16, at::kFloat, at::kDouble, at::kShort};
  constexpr int32_t kTypes = sizeof(types) / sizeof(types[0]);
  TANDEM_ENFORCE(element_type >= 0 && element_type < kTypes, "element type {}", element_type);
  return types[element_type];
}

namespace {

// The group's communicator; alone, one where every collective is an identity.
collective::Communicator& commOf(const Group& group) {
  if (group.comm) return *group.comm;
  static cluster::MemoryStore store;
  static auto solo = collective::Communicator::connect(store, {});
  return *solo;
}

// The one communicator call a reduction makes, on callers and joined ranks alike.
void reduceFlat(collective::Communicator& comm, void* data, int64_t count, int32_t type, int32_t op) {
  const auto element = static_cast<ElementType>(type);
  const auto reduction = static_cast<Reduction>(op);
  if (element == ElementType::kFloat32 && reduction == Reduction::kSum) {
    comm.allreduceSumOnce(static_cast<float*>(data), static_cast<size_t>(count));
  } else if (element == ElementType::kInt16) {
    // Gloo reduces no int16: in int32, whose low 16 bits wrap as int16's
    // own sum and product would, and whose min and max are exact.
    const torch::Tensor shorts = torch::from_blob(data, {count}, torch::kShort);
    torch::Tensor wide = shorts.to(torch::kInt);
    comm.allreduce(wide.data_ptr(), static_cast<size_t>(count), ElementType::kInt32, reduction);
    shorts.copy_(wide);
  } else {
    comm.allreduce(data, static_cast<size_t>(count), element, reduction);
  }
}

c10::Scalar integerLimit(at::ScalarType type, bool max) {
  switch (type) {
    case at::kByte: return max ? 255 : 0;
    case at::kChar: return max ? 127 : -128;
    case at::kShort: return max ? std::numeric_limits<int16_t>::max() : std::numeric_limits<int16_t>::min();
    case at::kInt: return max ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int32_t>::min();
    default: return max ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
  }
}

// A joined rank's part in a reduction: the op's identity.
torch::Tensor identityFor(const Announcement& call) {
  const at::ScalarType type = scalarTypeOf(call.dtype);
  const auto opts = torch::TensorOptions().dtype(type);
  switch (static_cast<Reduction>(call.op)) {
    case Reduction::kProduct: return torch::ones({call.count}, opts);
    case Reduction::kMin:
      return at::isFloatingType(type) ? torch::full({call.count}, std::numeric_limits<double>::infinity(), opts)
                                      : torch::full({call.count}, integerLimit(type, true), opts);
    case Reduction::kMax:
      return at::isFloatingType(type) ? torch::full({call.count}, -std::numeric_limits<double>::infinity(), opts)
                                      : torch::full({call.count}, integerLimit(type, false), opts);
    case Reduction::kSum: break;
  }
  return torch::zeros({call.count}, opts);
}

void scaleInPlace(torch::Tensor& t, double factor) {
  if (factor == 1.0) return;
  if (at::isFloatingType(t.scalar_type())) {
    t.mul_(factor);
  } else {
    t.copy_(t.to(torch::kDouble).mul_(factor));  // integers truncate toward zero
  }
}

uint64_t signatureOf(CallKind kind, const std::vector<torch::Tensor>& tensors, bool skip_first_dim, int64_t extra,
                     const std::string& name) {
  Fnv1a hash;
  hash.addValue(kind);
  hash.addValue(extra);
  for (const auto& t : tensors) {
    hash.addValue(static_cast<int>(t.scalar_type()));
    for (int64_t d = skip_first_dim ? 1 : 0; d < t.dim(); ++d) hash.addValue(t.size(d));
    hash.addValue(int64_t{-1});
  }
  hash.add(name.data(), name.size());
  return hash.value();
}

// One contiguous host tensor: reduced where it lies, without a copy.
bool reducedInPlace(const std::vector<torch::Tensor>& tensors) {
  return tensors.size() == 1 && tensors[0].device().is_cpu() && tensors[0].is_contiguous();
}

// The tensors' values, contiguous on the host: the tensor itself when it can be.
torch::Tensor hostFlat(const std::vector<torch::Tensor>& tensors) {
  if (reducedInPlace(tensors)) {
    return tensors[0].detach().view({-1});
  }
  std::vector<torch::Tensor> flat;
  for (const auto& t : tensors) flat.push_back(t.detach().to(torch::kCPU).reshape({-1}));
  return torch::cat(flat);
}

void copyBack(const torch::Tensor& flat, std::vector<torch::Tensor>& tensors) {
  if (reducedInPlace(tensors)) return;
  int64_t offset = 0;
  for (auto& t : tensors) {
    t.detach().copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

std::string typeProblem(const char* call, const torch::Tensor& t) {
  if (elementTypeOf(t.scalar_type())) return "";
  return fmt::format("tandem {}: {} tensors are not supported (uint8, int8, int16, int32, int64, float16, "
                     "bfloat16, float32, float64 are)",
                     call, c10::toString(t.scalar_type()));
}

// An allgather's or alltoall's announcement: rows may differ across ranks,
// the rest of the shape may not.
Announcement rowsAnnouncement(CallKind kind, const torch::Tensor& tensor, const std::string& problem,
                              const std::string& name) {
  Announcement mine;
  mine.kind = kind;
  mine.invalid = !problem.empty();
  if (problem.empty()) {
    mine.dtype = static_cast<int32_t>(*elementTypeOf(tensor.scalar_type()));
    mine.count = tensor.size(0);
    mine.signature = signatureOf(kind, {tensor}, true, 0, name);
  }
  return mine;
}

void throwIfRefused(const std::string& problem, const Agreement& agreement) {
  if (!problem.empty()) throw InputError(problem);
  if (!agreement.error.empty()) throw MismatchError("tandem: " + agreement.error);
}

// Submits `body` to the group's communication thread (inline without
// peers); the outputs it returns are the Work's.
Work launch(Job& job, const Group& group, const std::string& what, std::function<std::vector<torch::Tensor>()> body,
            double timeout_s = 0);

}  // namespace

Agreement negotiate(const Group& group, const Announcement& mine) {
  collective::Communicator& comm = commOf(group);
  std::vector<Announcement> all(static_cast<size_t>(comm.size()));
  comm.allgather(&mine, all.data(), sizeof(Announcement));
  return agree(all);
}

}  // namespace api

Work submitWork(std::shared_ptr<Work::State> state) {
  Work work;
  work.state_ = std::move(state);
  return work;
}

namespace api {
namespace {

Work launch(Job& job, const Group& group, const std::string& what, std::function<std::vector<torch::Tensor>()> body,
            double timeout_s) {
  auto state = std::make_shared<Work::State>();
  state->what = group.id == 0 ? what : fmt::format("{} in process set {}", what, group.id);
  state->timeout_s = timeout_s > 0 ? timeout_s : job.options.peer_timeout_s + 5.0;
  if (!group.thread) {
    state->outputs = body();
    return submitWork(state);
  }
  state->handle = group.thread->submit(
      traced(job, [&what] { return what; }, [state, body = std::move(body)] { state->outputs = body(); }));
  return submitWork(state);
}

std::optional<Reduction> reductionOf(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Average: return Reduction::kSum;
    case ReduceOp::Min: return Reduction::kMin;
    case ReduceOp::Max: return Reduction::kMax;
    case ReduceOp::Product: return Reduction::kProduct;
    case ReduceOp::Adasum: return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace
}  // namespace api

using api::Announcement;
using api::CallKind;
using api::Job;

Work allreduce_async(std::vector<torch::Tensor> tensors, const ReduceOptions& options) {
  Job& job = api::requireJob("allreduce");
  const api::Group group = api::groupOf(job, options.process_set, "allreduce");
  std::string problem;
  const auto reduction = api::reductionOf(options.op);
  if (!reduction) problem = "tandem allreduce: op Adasum is not supported (Sum, Average, Min, Max, Product are)";
  if (tensors.empty()) problem = "tandem allreduce: no tensors";
  for (const auto& t : tensors) {
    if (problem.empty()) problem = api::typeProblem("allreduce", t);
    if (problem.empty() && t.scalar_type() != tensors[0].scalar_type()) {
      problem = fmt::format("tandem grouped_allreduce: tensors of one dtype, got {} and {}",
                            c10::toString(tensors[0].scalar_type()), c10::toString(t.scalar_type()));
    }
  }
  Announcement mine;
  mine.kind = CallKind::kAllreduce;
  mine.invalid = !problem.empty();
  if (problem.empty()) {
    mine.dtype = static_cast<int32_t>(*api::elementTypeOf(tensors[0].scalar_type()));
    mine.op = static_cast<int32_t>(*reduction);
    for (const auto& t : tensors) mine.count += t.numel();
    mine.signature = api::signatureOf(mine.kind, tensors, false, mine.op, options.name);
  }
  const double post = options.postscale / (options.op == ReduceOp::Average ? group.size : 1);
  return api::launch(job, group, "allreduce of " + std::to_string(mine.count) + " values",
                     [group, tensors, mine, problem, options, post]() mutable {
                       api::throwIfRefused(problem, api::negotiate(group, mine));
                       torch::NoGradGuard no_grad;
                       torch::Tensor flat = api::hostFlat(tensors);
                       api::scaleInPlace(flat, options.prescale);
                       api::reduceFlat(api::commOf(group), flat.data_ptr(), mine.count, mine.dtype, mine.op);
                       api::scaleInPlace(flat, post);
                       api::copyBack(flat, tensors);
                       return tensors;
                     });
}

void allreduce(torch::Tensor& tensor, ReduceOp op) {
  ReduceOptions options;
  options.op = op;
  allreduce_async({tensor}, options).wait();
}

void allreduce(std::vector<torch::Tensor> tensors, const ReduceOptions& options) {
  allreduce_async(std::move(tensors), options).wait();
}

Work allgather_async(torch::Tensor tensor, const std::string& name, int process_set) {
  Job& job = api::requireJob("allgather");
  const api::Group group = api::groupOf(job, process_set, "allgather");
  std::string problem = api::typeProblem("allgather", tensor);
  if (problem.empty() && tensor.dim() == 0) problem = "tandem allgather: a 0-dimensional tensor has no rows to gather";
  const Announcement mine = api::rowsAnnouncement(CallKind::kAllgather, tensor, problem, name);
  return api::launch(job, group, "allgather", [group, tensor, mine, problem]() -> std::vector<torch::Tensor> {
    const api::Agreement agreement = api::negotiate(group, mine);
    api::throwIfRefused(problem, agreement);
    torch::Tensor mine_rows = tensor.detach().to(torch::kCPU).contiguous();
    std::vector<int64_t> shape = mine_rows.sizes().vec();
    const int64_t row_elems = c10::multiply_integers(shape.begin() + 1, shape.end());
    const int64_t max_rows = *std::max_element(agreement.counts.begin(), agreement.counts.end());
    const int ranks = static_cast<int>(agreement.counts.size());
    // Every rank's rows padded to the longest, then compacted.
    torch::Tensor padded = torch::zeros({max_rows * row_elems}, mine_rows.options());
    padded.narrow(0, 0, mine_rows.numel()).copy_(mine_rows.view({-1}));
    torch::Tensor gathered = torch::empty({ranks * max_rows * row_elems}, mine_rows.options());
    api::commOf(group).allgather(padded.data_ptr(), gathered.data_ptr(), static_cast<size_t>(padded.nbytes()));
    std::vector<torch::Tensor> parts;
    for (int r = 0; r < ranks; ++r) {
      parts.push_back(gathered.narrow(0, r * max_rows * row_elems, agreement.counts[r] * row_elems));
    }
    shape[0] = std::accumulate(agreement.counts.begin(), agreement.counts.end(), int64_t{0});
    return {torch::cat(parts).view(shape).to(tensor.device())};
  });
}

torch::Tensor allgather(const torch::Tensor& tensor, const std::string& name, int process_set) {
  return allgather_async(tensor, name, process_set).wait().at(0);
}

Work broadcast_async(std::vector<torch::Tensor> tensors, int root_rank, const std::string& name, int process_set) {
  Job& job = api::requireJob("broadcast");
  const api::Group group = api::groupOf(job, process_set, "broadcast");
  std::string problem;
  // The root is the job's rank; the set's rank of it is what moves the data.
  const std::optional<int> root = group.rankOf(root_rank);
  if (!root && process_set == 0) {
    problem = fmt::format("tandem broadcast: root rank {} outside 0..{}", root_rank, job.size() - 1);
  } else if (!root) {
    throw InputError(fmt::format("broadcast: root rank {} is not in process set {} (ranks {})", root_rank,
                                 process_set, fmt::join(group.members, ", ")));
  }
  if (tensors.empty()) problem = "tandem broadcast: no tensors";
  for (const auto& t : tensors) {
    if (problem.empty()) problem = api::typeProblem("broadcast", t);
  }
  Announcement mine;
  mine.kind = CallKind::kBroadcast;
  mine.invalid = !problem.empty();
  mine.root = root.value_or(-1);
  if (problem.empty()) {
    mine.dtype = static_cast<int32_t>(*api::elementTypeOf(tensors[0].scalar_type()));
    for (const auto& t : tensors) mine.count += t.numel();
    mine.signature = api::signatureOf(mine.kind, tensors, false, root_rank, name);
  }
  return api::launch(job, group, "broadcast", [group, tensors, mine, problem]() mutable {
    api::throwIfRefused(problem, api::negotiate(group, mine));
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> bytes;
    for (const auto& t : tensors) bytes.push_back(t.detach().to(torch::kCPU).contiguous().view({-1}).view(torch::kByte));
    torch::Tensor flat = bytes.size() == 1 ? bytes[0] : torch::cat(bytes);
    api::commOf(group).broadcast(flat.data_ptr(), static_cast<size_t>(flat.numel()), mine.root);
    int64_t offset = 0;
    for (auto& t : tensors) {
      const int64_t n = t.numel() * static_cast<int64_t>(t.element_size());
      torch::Tensor values = flat.narrow(0, offset, n).view(t.scalar_type()).view(t.sizes());
      if (values.data_ptr() != t.data_ptr()) t.detach().copy_(values);
      offset += n;
    }
    return tensors;
  });
}

void broadcast(torch::Tensor& tensor, int root_rank, const std::string& name, int process_set) {
  broadcast_async({tensor}, root_rank, name, process_set).wait();
}

Work alltoall_async(torch::Tensor tensor, std::vector<int64_t> splits, const std::string& name, int process_set) {
  Job& job = api::requireJob("alltoall");
  const api::Group group = api::groupOf(job, process_set, "alltoall");
  std::string problem = api::typeProblem("alltoall", tensor);
  const int ranks = group.size;
  if (problem.empty() && tensor.dim() == 0) problem = "tandem alltoall: a 0-dimensional tensor has no rows to send";
  if (problem.empty() && splits.empty()) {
    if (tensor.size(0) % ranks != 0) {
      problem = fmt::format("tandem alltoall: {} rows do not divide evenly over {} ranks; pass splits",
                            tensor.size(0), ranks);
    } else {
      splits.assign(static_cast<size_t>(ranks), tensor.size(0) / ranks);
    }
  }
  if (problem.empty()) {
    const int64_t total = std::accumulate(splits.begin(), splits.end(), int64_t{0});
    const bool negative = std::any_of(splits.begin(), splits.end(), [](int64_t s) { return s < 0; });
    if (static_cast<int>(splits.size()) != ranks || negative || total != tensor.size(0)) {
      problem = fmt::format("tandem alltoall: splits must be {} non-negative row counts adding up to {}, got [{}]",
                            ranks, tensor.size(0), fmt::join(splits, ", "));
    }
  }
  const Announcement mine = api::rowsAnnouncement(CallKind::kAlltoall, tensor, problem, name);
  return api::launch(job, group, "alltoall", [group, tensor, splits, mine, problem]() -> std::vector<torch::Tensor> {
    api::throwIfRefused(problem, api::negotiate(group, mine));
    collective::Communicator& comm = api::commOf(group);
    const auto n = static_cast<size_t>(comm.size());
    std::vector<int64_t> received(n);
    comm.alltoallv(splits.data(), std::vector<size_t>(n, sizeof(int64_t)), received.data(),
                   std::vector<size_t>(n, sizeof(int64_t)));
    torch::Tensor rows = tensor.detach().to(torch::kCPU).contiguous();
    std::vector<int64_t> shape = rows.sizes().vec();
    const auto row_bytes = static_cast<size_t>(c10::multiply_integers(shape.begin() + 1, shape.end())) *
                           static_cast<size_t>(rows.element_size());
    std::vector<size_t> send_bytes(n), recv_bytes(n);
    for (size_t r = 0; r < n; ++r) {
      send_bytes[r] = static_cast<size_t>(splits[r]) * row_bytes;
      recv_bytes[r] = static_cast<size_t>(received[r]) * row_bytes;
    }
    shape[0] = std::accumulate(received.begin(), received.end(), int64_t{0});
    torch::Tensor out = torch::empty(shape, rows.options());
    comm.alltoallv(rows.data_ptr(), send_bytes, out.data_ptr(), recv_bytes);
    return {out.to(tensor.device()), torch::tensor(received, torch::kLong).to(torch::kInt)};
  });
}

void barrier(int process_set) {
  Job& job = api::requireJob("barrier");
  const api::Group group = api::groupOf(job, process_set, "barrier");
  api::launch(job, group, "barrier", [group]() -> std::vector<torch::Tensor> {
    Announcement mine;
    mine.kind = CallKind::kBarrier;
    api::throwIfRefused("", api::negotiate(group, mine));
    return {};
  }).wait();
}

int join() {
  Job& job = api::requireJob("join");
  auto last = std::make_shared<int>(-1);
  const api::Group whole = api::wholeJob(job);
  auto work = api::launch(job, whole, "join", [&job, whole, last]() -> std::vector<torch::Tensor> {
    Announcement mine;
    mine.kind = CallKind::kJoin;
    mine.first_join = 1;
    for (;;) {
      const api::Agreement agreement = api::negotiate(whole, mine);
      mine.first_join = 0;
      // As in Horovod, a call the others cannot make beside a joined rank
      // (or make differently) raises there; this rank waits on.
      if (!agreement.error.empty()) continue;
      if (agreement.all_joined) {
        *last = agreement.last_joined;
        return {};
      }
      const Announcement& call = agreement.call;
      if (call.kind == CallKind::kAllreduce) {
        torch::Tensor identity = api::identityFor(call);
        api::reduceFlat(api::commOf(whole), identity.data_ptr(), call.count, call.dtype, call.op);
      } else if (call.kind == CallKind::kGradients) {
        std::function<void()> serve;
        {
          std::lock_guard<std::mutex> lock(job.servers_mutex);
          auto it = job.zero_gradients.find(call.signature);
          if (it != job.zero_gradients.end()) serve = it->second;
        }
        if (!serve) {
          throw InputError(fmt::format("tandem join: rank {} has joined, but has no DistributedOptimizer like the "
                                       "one rank(s) still training step with",
                                       job.rank()));
        }
        serve();
      }
    }
  }, /*timeout_s=*/1e9);
  // A joined rank waits for the others' training as long as it lasts; each
  // round is bounded by the peer timeout of the collective it serves.
  work.wait();
  return *last;
}

int cross_rank() { return api::requireJob("cross_rank").cross_rank; }
int cross_size() { return api::requireJob("cross_size").cross_size; }

}  // namespace tandem
