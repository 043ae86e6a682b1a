#include "collective/communicator.hpp"

// c10d's Gloo backend: the Gloo compiled into LibTorch. Its header declares
// Gloo types by name only (shared pointers to a device, a store, contexts),
// so Debian's Gloo headers stand in for the wheel's, which it does not
// ship. Nothing here touches a Gloo object's layout, and nothing links
// Debian's libgloo: every Gloo symbol binds into libtorch_cpu
// (tests/collective_one_gloo_test.cpp proves it).
// USE_C10D_GLOO, which the header needs, comes with the torch target.
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <exception>
#include <mutex>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace tandem::collective {
namespace {

at::ScalarType scalarTypeOf(ElementType type) {
  switch (type) {
    case ElementType::kUint8: return at::kByte;
    case ElementType::kInt8: return at::kChar;
    case ElementType::kInt32: return at::kInt;
    case ElementType::kInt64: return at::kLong;
    case ElementType::kFloat16: return at::kHalf;
    case ElementType::kBfloat16: return at::kBFloat16;
    case ElementType::kFloat32: return at::kFloat;
    case ElementType::kFloat64: return at::kDouble;
    case ElementType::kInt16: return at::kShort;
  }
  throw Error("unknown element type");
}

c10d::ReduceOp reduceOpOf(Reduction op) {
  switch (op) {
    case Reduction::kSum: return c10d::ReduceOp::SUM;
    case Reduction::kProduct: return c10d::ReduceOp::PRODUCT;
    case Reduction::kMin: return c10d::ReduceOp::MIN;
    case Reduction::kMax: return c10d::ReduceOp::MAX;
  }
  throw Error("unknown reduction");
}

void checkArguments(const CommunicatorOptions& options) {
  TANDEM_ENFORCE(options.size >= 1, "communicator size {}", options.size);
  TANDEM_ENFORCE(options.rank >= 0 && options.rank < options.size, "rank {} of size {}", options.rank,
                 options.size);
  TANDEM_ENFORCE(options.timeout.count() > 0, "timeout {} ms", options.timeout.count());
}

void checkExchange(const std::vector<size_t>& send_bytes, const std::vector<size_t>& recv_bytes, int rank,
                   int size) {
  TANDEM_ENFORCE(send_bytes.size() == static_cast<size_t>(size) && recv_bytes.size() == static_cast<size_t>(size),
                 "all-to-all with {} send and {} receive sizes for {} ranks", send_bytes.size(), recv_bytes.size(),
                 size);
  TANDEM_ENFORCE(send_bytes[rank] == recv_bytes[rank], "all-to-all: rank {} sends itself {} bytes but expects {}",
                 rank, send_bytes[rank], recv_bytes[rank]);
}

void checkRoot(int root, int size) {
  TANDEM_ENFORCE(root >= 0 && root < size, "broadcast root {} of size {}", root, size);
}

// c10d's view of a Tandem store: Gloo's rendezvous needs set, get and wait.
// Counters, deletion and listing are not part of Tandem's vocabulary, and
// c10d's Gloo does not call them; a call names itself. Serialised, since
// c10d may call from its own threads and a CoordinatorClient is not
// thread-safe.
class StoreForC10d final : public c10d::Store {
 public:
  explicit StoreForC10d(cluster::KeyValueStore& store) : c10d::Store(store.timeout()), store_(store) {}

  c10::intrusive_ptr<c10d::Store> clone() override { return c10::make_intrusive<StoreForC10d>(store_); }
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    std::lock_guard lock(mutex_);
    store_.set(key, std::vector<char>(value.begin(), value.end()));
  }
  std::vector<uint8_t> get(const std::string& key) override {
    std::lock_guard lock(mutex_);
    const auto value = store_.get(key);
    return {value.begin(), value.end()};
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::lock_guard lock(mutex_);
    store_.wait(keys, timeout);
  }
  int64_t add(const std::string& key, int64_t) override { unsupported("add", key); }
  bool deleteKey(const std::string& key) override { unsupported("deleteKey", key); }
  bool check(const std::vector<std::string>& keys) override {
    unsupported("check", keys.empty() ? std::string() : keys.front());
  }
  int64_t getNumKeys() override { unsupported("getNumKeys", ""); }

 private:
  [[noreturn]] static void unsupported(const char* call, const std::string& key) {
    throw Error(fmt::format("Tandem's store has no '{}' (asked by c10d for key '{}')", call, key));
  }
  cluster::KeyValueStore& store_;
  std::mutex mutex_;
};

// Gloo's TCP errors name a peer only by a socket address ("[10.0.0.2]:41234"),
// or not at all (a timed-out receive), and c10d hides the pairs that would
// map an address to a rank. Each rank publishes the host it listens on; an
// error naming the only peer on a host names that rank, and with two ranks
// the peer is the other one.
std::string namePeers(const std::string& cause, const std::vector<std::string>& hosts, int self) {
  if (hosts.size() == 2) return fmt::format("{} (its only peer is rank {})", cause, 1 - self);
  std::vector<size_t> matches;
  for (size_t r = 0; r < hosts.size(); ++r) {
    if (static_cast<int>(r) == self || hosts[r].empty()) continue;
    if (cause.find("[" + hosts[r] + "]:") != std::string::npos) matches.push_back(r);
  }
  size_t peers_on_host = 0;
  if (matches.size() == 1) {
    for (size_t r = 0; r < hosts.size(); ++r) {
      if (static_cast<int>(r) != self && hosts[r] == hosts[matches[0]]) ++peers_on_host;
    }
  }
  if (peers_on_host == 1) return fmt::format("{} (the only peer on that host is rank {})", cause, matches[0]);
  return cause;
}

// A peer that dies mid-send makes Gloo's writev raise SIGPIPE, whose default
// action kills this process before Gloo can report the closed socket as an
// error. Ignoring it turns the death into EPIPE and then a PeerError. A
// handler the program installed itself is left alone.
void ignoreSigpipe() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, nullptr);
  }
}

// c10::Error appends a C++ backtrace to its message; the cause is the first
// line.
std::string firstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

at::Tensor bytesAt(const void* data, size_t bytes) {
  // c10d only reads an input tensor; from_blob wants a mutable pointer.
  return at::from_blob(const_cast<void*>(data), {static_cast<int64_t>(bytes)}, at::kByte);
}

// One process: every collective is the identity (allgather a copy), and no
// device or socket is created, so standalone runs need no network at all.
class SoloCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduceSum(float*, size_t) override {}
  void allreduceSumOnce(float*, size_t) override {}
  void allreduceSum16(void*, size_t, WireDtype) override {}
  void allreduce(void*, size_t, ElementType, Reduction) override {}
  void broadcast(void*, size_t, int root) override { checkRoot(root, 1); }
  void allgather(const void* in, void* out, size_t bytes) override {
    if (bytes > 0 && in != out) std::memmove(out, in, bytes);
  }
  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) override {
    checkExchange(send_bytes, recv_bytes, 0, 1);
    if (send_bytes[0] > 0 && in != out) std::memmove(out, in, send_bytes[0]);
  }
  void barrier() override {}
  void abandon() override {}
};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(c10::intrusive_ptr<c10d::ProcessGroupGloo> group, const CommunicatorOptions& options,
                   std::vector<std::string> peer_hosts)
      : group_(std::move(group)), options_(options), peer_hosts_(std::move(peer_hosts)) {}

  ~GlooCommunicator() override {
    // Gloo treats a peer's EOF as an error for every wait on that pair, even
    // when the awaited data already arrived. A fast rank closing its sockets
    // right after the last collective would thus fail a slower rank still
    // finishing it. On a normal exit, first wait until every rank has stopped
    // issuing collectives; skip that when broken or unwinding from an error,
    // where peers may never arrive and closing at once tells them sooner.
    if (broken_.empty() && std::uncaught_exceptions() == 0) {
      try {
        run(group_->barrier(barrierOptions()));
      } catch (...) {
        // Closing anyway; a peer that failed here has its own error to report.
      }
    }
  }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }

  void allreduceSum(float* data, size_t count) override { sum(data, count, at::kFloat, "floats"); }
  void allreduceSumOnce(float* data, size_t count) override { sum(data, count, at::kFloat, "floats"); }
  void allreduce(void* data, size_t count, ElementType type, Reduction op) override {
    reduce(data, count, scalarTypeOf(type), reduceOpOf(op), fmt::format("{} values", c10::toString(scalarTypeOf(type))));
  }

  void allreduceSum16(void* data, size_t count, WireDtype dtype) override {
    TANDEM_ENFORCE(dtype != WireDtype::kFloat32, "allreduceSum16 of float32 values");
    const auto type = dtype == WireDtype::kFloat16 ? at::kHalf : at::kBFloat16;
    sum(data, count, type, fmt::format("{} values", wireDtypeName(dtype)));
  }

  void broadcast(void* data, size_t bytes, int root) override {
    checkRoot(root, options_.size);
    guarded([&] { return fmt::format("broadcast of {} bytes from rank {}", bytes, root); },
            [&] {
              if (bytes == 0) return;
              std::vector<at::Tensor> tensors{bytesAt(data, bytes)};
              c10d::BroadcastOptions opts;
              opts.rootRank = root;
              opts.timeout = options_.timeout;
              run(group_->broadcast(tensors, opts));
            });
  }

  void allgather(const void* in, void* out, size_t bytes) override {
    guarded([&] { return fmt::format("allgather of {} bytes per rank", bytes); },
            [&] {
              if (bytes == 0) return;
              auto* out_bytes = static_cast<char*>(out);
              std::vector<std::vector<at::Tensor>> outputs(1);
              for (int r = 0; r < options_.size; ++r) {
                outputs[0].push_back(bytesAt(out_bytes + static_cast<size_t>(r) * bytes, bytes));
              }
              // In place when the caller put its bytes in its own slot: a
              // copy of that slot, since Gloo writes every output.
              at::Tensor input = bytesAt(in, bytes);
              if (in == out_bytes + static_cast<size_t>(options_.rank) * bytes) input = input.clone();
              std::vector<at::Tensor> inputs{input};
              c10d::AllgatherOptions opts;
              opts.timeout = options_.timeout;
              run(group_->allgather(outputs, inputs, opts));
            });
  }

  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) override {
    checkExchange(send_bytes, recv_bytes, options_.rank, options_.size);
    size_t total_in = 0;
    size_t total_out = 0;
    for (int r = 0; r < options_.size; ++r) {
      total_in += send_bytes[r];
      total_out += recv_bytes[r];
    }
    guarded([&] { return fmt::format("all-to-all of {} bytes out, {} in", total_in, total_out); },
            [&] {
              // Every rank runs it, even with nothing to move: peers' (empty)
              // messages must be matched, or a later exchange would take them.
              char empty = 0;
              at::Tensor input = bytesAt(total_in > 0 ? in : &empty, total_in);
              at::Tensor output = bytesAt(total_out > 0 ? out : &empty, total_out);
              std::vector<int64_t> in_splits(send_bytes.begin(), send_bytes.end());
              std::vector<int64_t> out_splits(recv_bytes.begin(), recv_bytes.end());
              c10d::AllToAllOptions opts;
              opts.timeout = options_.timeout;
              run(group_->alltoall_base(output, input, out_splits, in_splits, opts));
            });
  }

  void abandon() override {
    if (broken_.empty()) broken_ = "abandoned after a failure beside it";
  }
  void barrier() override {
    guarded([] { return std::string("barrier"); }, [&] { run(group_->barrier(barrierOptions())); });
  }

 private:
  void sum(void* data, size_t count, at::ScalarType type, const std::string& what) {
    reduce(data, count, type, c10d::ReduceOp::SUM, what);
  }

  void reduce(void* data, size_t count, at::ScalarType type, c10d::ReduceOp op, const std::string& what) {
    guarded([&] { return fmt::format("allreduce of {} {}", count, what); },
            [&] {
              if (count == 0) return;
              std::vector<at::Tensor> tensors{at::from_blob(data, {static_cast<int64_t>(count)}, type)};
              c10d::AllreduceOptions opts;
              opts.reduceOp = op;
              opts.timeout = options_.timeout;
              run(group_->allreduce(tensors, opts));
            });
  }

  c10d::BarrierOptions barrierOptions() const {
    c10d::BarrierOptions opts;
    opts.timeout = options_.timeout;
    return opts;
  }

  // Gloo's own timeout (the group's) bounds every wait.
  static void run(const c10::intrusive_ptr<c10d::Work>& work) { work->wait(); }

  // Runs one collective. A failure mid-collective leaves peers and Gloo's
  // tags in an unknown state, so the communicator refuses all later calls
  // rather than risk mismatched messages. `describe` is only evaluated on
  // failure, keeping formatting off the hot path.
  template <class Describe, class Body>
  void guarded(Describe&& describe, Body&& body) {
    if (!broken_.empty()) {
      throw PeerError(fmt::format("{} refused on rank {}: the communicator is unusable after an earlier failure: {}",
                                  describe(), options_.rank, broken_));
    }
    std::string cause;
    try {
      body();
      return;
    } catch (const std::exception& e) {  // c10::Error, c10::DistBackendError, ...
      cause = firstLine(e.what());
    } catch (...) {
      cause = "unknown exception";
    }
    const std::string message = fmt::format("{} failed on rank {} of {} (peer timeout {} ms): {}", describe(),
                                            options_.rank, options_.size, options_.timeout.count(),
                                            namePeers(cause, peer_hosts_, options_.rank));
    broken_ = message;
    throw PeerError(message);
  }

  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
  CommunicatorOptions options_;
  std::vector<std::string> peer_hosts_;  // by rank, to name peers in errors
  std::string broken_;                   // empty while usable; else the failure that broke it
};

}  // namespace

std::unique_ptr<Communicator> Communicator::connect(cluster::KeyValueStore& store,
                                                    const CommunicatorOptions& options) {
  checkArguments(options);
  if (options.size == 1) return std::make_unique<SoloCommunicator>();
  ignoreSigpipe();

  auto group_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
  try {
    group_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(options.local_host));
  } catch (const std::exception& e) {
    // Binding a local address involves no peer: this is a configuration error.
    throw Error(fmt::format("rank {}: cannot create a TCP device on local host '{}': {}", options.rank,
                            options.local_host, e.what()));
  }
  // One thread runs the collectives: Tandem issues them one at a time, in
  // order, from its communication thread.
  group_options->threads = 1;

  auto c10d_store = c10::make_intrusive<StoreForC10d>(store);
  std::vector<std::string> hosts(static_cast<size_t>(options.size));
  try {
    store.set(fmt::format("host-of-rank-{}", options.rank),
              std::vector<char>(options.local_host.begin(), options.local_host.end()));
    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(c10d_store, options.rank, options.size, group_options);
    for (int r = 0; r < options.size; ++r) {
      const auto host = store.get(fmt::format("host-of-rank-{}", r));
      hosts[static_cast<size_t>(r)] = std::string(host.begin(), host.end());
    }
    return std::make_unique<GlooCommunicator>(std::move(group), options, std::move(hosts));
  } catch (const std::exception& e) {
    throw PeerError(fmt::format("connect (full-mesh rendezvous) failed on rank {} of {} at {} (peer timeout {} ms): {}",
                                options.rank, options.size, options.local_host, options.timeout.count(),
                                firstLine(e.what())));
  }
}

size_t elementBytes(ElementType type) { return c10::elementSize(scalarTypeOf(type)); }

}  // namespace tandem::collective
