#include "collective/nccl_communicator.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <climits>
#include <cstring>
#include <thread>

#include "core/clock.hpp"
#include "core/error.hpp"

namespace tandem::collective {
namespace {

// NCCL's C ABI, as far as Tandem uses it (nccl.h's values and layouts).
using NcclResult = int;
constexpr NcclResult kNcclSuccess = 0;
constexpr NcclResult kNcclInProgress = 7;
constexpr int kNcclSum = 0;
constexpr int kNcclFloat16 = 6, kNcclFloat32 = 7, kNcclBfloat16 = 9;
using NcclComm = void*;
struct NcclUniqueId {
  char internal[128];
};
// ncclConfig_t as of NCCL 2.14, which brought non-blocking communicators:
// later versions read a config by its own size and version, so this prefix
// stays valid, whichever NCCL LibTorch brings.
struct NcclConfig {
  size_t size = sizeof(NcclConfig);
  unsigned int magic = 0xcafebeef;
  unsigned int version = 21403;  // 2.14.3
  int blocking = INT_MIN;        // INT_MIN: NCCL's default
  int cga_cluster_size = INT_MIN;
  int min_ctas = INT_MIN;
  int max_ctas = INT_MIN;
  const char* net_name = nullptr;
};

struct Library {
  NcclResult (*getVersion)(int*) = nullptr;
  NcclResult (*getUniqueId)(NcclUniqueId*) = nullptr;
  NcclResult (*commInitRankConfig)(NcclComm*, int, NcclUniqueId, int, NcclConfig*) = nullptr;
  NcclResult (*commGetAsyncError)(NcclComm, NcclResult*) = nullptr;
  NcclResult (*commAbort)(NcclComm) = nullptr;
  NcclResult (*commDestroy)(NcclComm) = nullptr;
  NcclResult (*commFinalize)(NcclComm) = nullptr;
  NcclResult (*allReduce)(const void*, void*, size_t, int, int, NcclComm, void*) = nullptr;
  const char* (*getErrorString)(NcclResult) = nullptr;
  const char* (*getLastError)(NcclComm) = nullptr;  // null before NCCL 2.13
};

Library library_;

template <typename Fn>
bool bind(void* handle, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(handle, name));
  return fn != nullptr;
}

NcclStatus load(const std::string& path) {
  void* handle = nullptr;
  if (path.empty()) {
    // LibTorch's CUDA half links its own NCCL: use that one, never a second.
    handle = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
    if (handle == nullptr) handle = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  } else {
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  if (handle == nullptr) {
    const char* why = dlerror();
    return {false, fmt::format("libnccl.so.2 did not load ({})", why != nullptr ? why : "not found")};
  }
  Library lib;
  const bool all = bind(handle, "ncclGetVersion", lib.getVersion) && bind(handle, "ncclGetUniqueId", lib.getUniqueId) &&
                   bind(handle, "ncclCommInitRankConfig", lib.commInitRankConfig) &&
                   bind(handle, "ncclCommGetAsyncError", lib.commGetAsyncError) &&
                   bind(handle, "ncclCommAbort", lib.commAbort) && bind(handle, "ncclCommDestroy", lib.commDestroy) &&
                   bind(handle, "ncclCommFinalize", lib.commFinalize) && bind(handle, "ncclAllReduce", lib.allReduce) &&
                   bind(handle, "ncclGetErrorString", lib.getErrorString);
  if (!all) return {false, "libnccl.so.2 lacks non-blocking communicators (NCCL 2.14 or later is needed)"};
  bind(handle, "ncclGetLastError", lib.getLastError);
  int version = 0;
  if (lib.getVersion(&version) != kNcclSuccess) return {false, "ncclGetVersion failed"};
  library_ = lib;
  return {true, fmt::format("{}.{}.{}", version / 10000, version / 100 % 100, version % 100)};
}

const Library& loaded() {
  const NcclStatus& status = ncclStatus();
  if (!status.loaded) throw Error(fmt::format("NCCL is not available here: {}", status.detail));
  return library_;
}

}  // namespace

const NcclStatus& ncclStatus(const std::string& library) {
  static const NcclStatus status = load(library);  // the first caller loads; the rest wait
  return status;
}

NcclId makeNcclId() {
  NcclUniqueId id{};
  const NcclResult rc = loaded().getUniqueId(&id);
  if (rc != kNcclSuccess) throw Error(fmt::format("ncclGetUniqueId: {}", library_.getErrorString(rc)));
  NcclId out{};
  std::memcpy(out.data(), id.internal, out.size());
  return out;
}

NcclId exchangeNcclId(cluster::KeyValueStore& store, const std::string& key, int rank,
                      const std::function<NcclId()>& make, Deadline deadline) {
  NcclId id{};
  if (rank == 0) {
    id = make();
    store.set(key, std::vector<char>(id.begin(), id.end()));
    return id;
  }
  try {
    store.wait({key}, deadline.remaining());
  } catch (const std::exception& e) {
    throw PeerError(fmt::format("NCCL: no unique id from worker 0 under '{}' in time ({})", key, e.what()));
  }
  const std::vector<char> bytes = store.get(key);
  if (bytes.size() != id.size()) {
    throw PeerError(fmt::format("NCCL: the unique id under '{}' has {} bytes, not {}", key, bytes.size(), id.size()));
  }
  std::memcpy(id.data(), bytes.data(), id.size());
  return id;
}

struct NcclCommunicator::Handle {
  NcclComm comm = nullptr;
};

NcclCommunicator::NcclCommunicator(std::unique_ptr<Handle> handle, NcclOptions options)
    : handle_(std::move(handle)), options_(std::move(options)) {}

std::unique_ptr<NcclCommunicator> NcclCommunicator::connect(const NcclId& id, const NcclOptions& options) {
  const Library& lib = loaded();
  TANDEM_ENFORCE(options.size >= 1 && options.rank >= 0 && options.rank < options.size, "NCCL rank {} of {}",
                 options.rank, options.size);
  Stopwatch watch;
  NcclUniqueId raw{};
  std::memcpy(raw.internal, id.data(), id.size());
  NcclConfig config;
  config.blocking = 0;  // returns at once; set-up goes on until polled done
  auto handle = std::make_unique<Handle>();
  const NcclResult rc = lib.commInitRankConfig(&handle->comm, options.size, raw, options.rank, &config);
  if (rc != kNcclSuccess && rc != kNcclInProgress) {
    if (handle->comm != nullptr) lib.commAbort(handle->comm);
    throw Error(fmt::format("NCCL: worker {} of {} could not start joining {}: {}", options.rank, options.size,
                                options.job, lib.getErrorString(rc)));
  }
  std::unique_ptr<NcclCommunicator> comm(new NcclCommunicator(std::move(handle), options));
  const Deadline deadline = Deadline::after(options.timeout);
  for (;;) {
    NcclResult state = kNcclSuccess;
    lib.commGetAsyncError(comm->handle_->comm, &state);
    if (state == kNcclSuccess) break;
    if (state != kNcclInProgress) {
      comm->fail(fmt::format("worker {} of {} failed to join {}: {}", options.rank, options.size, options.job,
                             lib.getErrorString(state)));
    }
    if (deadline.expired()) {
      comm->fail(fmt::format("worker {} of {}: not every worker joined {} within {:.1f}s", options.rank, options.size,
                             options.job, options.timeout.count() / 1000.0));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  comm->setup_seconds_ = watch.elapsed();
  return comm;
}

NcclCommunicator::~NcclCommunicator() {
  if (!handle_ || handle_->comm == nullptr) return;
  // A communicator that failed, or is destroyed by an exception mid-step,
  // may have kernels waiting on peers: abort rather than flush.
  if (broken_ || std::uncaught_exceptions() > 0) {
    library_.commAbort(handle_->comm);
    return;
  }
  const Deadline deadline = Deadline::after(options_.timeout);
  NcclResult state = library_.commFinalize(handle_->comm);
  while (state == kNcclInProgress && !deadline.expired()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    library_.commGetAsyncError(handle_->comm, &state);
  }
  if (state != kNcclSuccess) {
    library_.commAbort(handle_->comm);
    return;
  }
  library_.commDestroy(handle_->comm);
}

void NcclCommunicator::fail(const std::string& why) {
  if (!broken_ && handle_->comm != nullptr) library_.commAbort(handle_->comm);
  broken_ = true;
  handle_->comm = nullptr;
  throw PeerError("NCCL: " + why);
}

void NcclCommunicator::checkAsyncError(const std::string& what) {
  NcclResult state = kNcclSuccess;
  library_.commGetAsyncError(handle_->comm, &state);
  if (state == kNcclSuccess || state == kNcclInProgress) return;
  const char* last = library_.getLastError != nullptr ? library_.getLastError(handle_->comm) : nullptr;
  fail(fmt::format("{} failed on worker {} of {}: {}{}", what, options_.rank, options_.size,
                   library_.getErrorString(state), last != nullptr && *last != '\0' ? fmt::format(" ({})", last) : ""));
}

void NcclCommunicator::allreduceSum(void* data, size_t count, WireDtype wire, void* stream) {
  if (broken_) throw PeerError("NCCL: the communicator failed earlier");
  const int type = wire == WireDtype::kFloat16 ? kNcclFloat16 : wire == WireDtype::kBfloat16 ? kNcclBfloat16 : kNcclFloat32;
  // Non-blocking: ncclInProgress means queued, still being set up.
  const NcclResult rc = library_.allReduce(data, data, count, type, kNcclSum, handle_->comm, stream);
  if (rc != kNcclSuccess && rc != kNcclInProgress) {
    fail(fmt::format("all-reduce of {} values could not be queued on worker {}: {}", count, options_.rank,
                     library_.getErrorString(rc)));
  }
}

void NcclCommunicator::await(const std::function<bool()>& done, const std::string& what) {
  if (broken_) throw PeerError("NCCL: the communicator failed earlier");
  const Deadline deadline = Deadline::after(options_.timeout);
  for (;;) {
    if (done()) return;
    checkAsyncError(what);
    if (deadline.expired()) {
      fail(fmt::format("{} did not finish within {:.1f}s on worker {} of {}: a peer died or stalls", what,
                       options_.timeout.count() / 1000.0, options_.rank, options_.size));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace tandem::collective
