#include "collective/communicator.hpp"

#include <fmt/format.h>
#include <gloo/allgather.h>
#include <gloo/alltoallv.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <signal.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace tandem::collective {
namespace {

// A 16-bit wire value as Gloo's algorithm templates see it: only its size
// and its sum matter (the specialisations below).
template <WireDtype D>
struct Wire16 {
  uint16_t bits;
};

}  // namespace
}  // namespace tandem::collective

// Gloo's algorithms reduce through gloo::sum<T>: for 16-bit values, each
// addition in float32, rounded back (core/wire_dtype).
template <>
void gloo::sum<tandem::collective::Wire16<tandem::WireDtype::kFloat16>>(void* c, const void* a, const void* b,
                                                                        size_t n) {
  tandem::sumWire16(tandem::WireDtype::kFloat16, c, a, b, n);
}
template <>
void gloo::sum<tandem::collective::Wire16<tandem::WireDtype::kBfloat16>>(void* c, const void* a, const void* b,
                                                                         size_t n) {
  tandem::sumWire16(tandem::WireDtype::kBfloat16, c, a, b, n);
}

namespace tandem::collective {
namespace {

// Cached all-reduce algorithms keep their buffers registered with every peer
// (and ring-chunked keeps two inboxes the size of the buffer), so a benchmark
// sweeping sizes must not grow the cache without bound. Clearing is
// deterministic (same sequence of hits and misses on every rank), which keeps
// Gloo's per-context slot numbering in step across ranks.
constexpr size_t kMaxCachedAlgorithms = 64;
constexpr size_t kMaxCachedBytes = size_t{1} << 30;
// Keeps the closing barrier's messages apart from those of barrier().
constexpr uint32_t kClosingBarrierTag = 1;

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

// Gloo's TCP errors name a peer only by a socket address ("[10.0.0.2]:41234").
// At connect each rank publishes the address of its end of every pair
// (Pair::address()) with one allgather, so an error can name a rank. The
// address a peer's error shows is not always the published one (a dialled
// socket gets an ephemeral port), so when no port matches, the host alone
// names the rank if only one peer lives there.
std::vector<std::string> exchangePeerAddresses(const std::shared_ptr<gloo::Context>& context,
                                               std::chrono::milliseconds timeout) {
  constexpr size_t kWidth = 96;  // fits "[IPv6 address]:port"; longer ones are cut
  const auto n = static_cast<size_t>(context->size);
  const auto self = static_cast<size_t>(context->rank);
  std::vector<char> mine(n * kWidth, '\0');
  for (size_t k = 0; k < n; ++k) {
    if (k == self) continue;
    const std::string address = context->getPair(static_cast<int>(k))->address().str();
    std::memcpy(&mine[k * kWidth], address.data(), std::min(address.size(), kWidth - 1));
  }
  std::vector<char> all(n * n * kWidth);
  gloo::AllgatherOptions opts(context);
  opts.setInput(mine.data(), mine.size());
  opts.setOutput(all.data(), all.size());
  opts.setTimeout(timeout);
  gloo::allgather(opts);
  std::vector<std::string> addresses(n);
  for (size_t j = 0; j < n; ++j) {
    if (j == self) continue;
    const char* entry = &all[(j * n + self) * kWidth];
    addresses[j] = std::string(entry, strnlen(entry, kWidth));
  }
  return addresses;
}

// True when `text` contains `needle` not followed by another digit, so that
// "]:1234" does not match inside "]:12345".
bool containsToken(const std::string& text, const std::string& needle) {
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) {
    const size_t end = pos + needle.size();
    if (end == text.size() || !std::isdigit(static_cast<unsigned char>(text[end]))) return true;
  }
  return false;
}

// Appends which rank the peer address in Gloo's message belongs to, when
// that can be told without guessing.
std::string namePeers(const std::string& cause, const std::vector<std::string>& addresses) {
  std::vector<size_t> exact;
  std::vector<size_t> same_host;
  for (size_t r = 0; r < addresses.size(); ++r) {
    const auto& address = addresses[r];
    if (address.empty()) continue;
    if (containsToken(cause, address)) exact.push_back(r);
    // "[host]:" prefix of "[host]:port".
    if (const auto colon = address.rfind(':'); colon != std::string::npos &&
                                               cause.find(address.substr(0, colon + 1)) != std::string::npos) {
      same_host.push_back(r);
    }
  }
  if (exact.size() == 1) return fmt::format("{} ({} is rank {})", cause, addresses[exact[0]], exact[0]);
  if (exact.empty() && same_host.size() == 1) {
    return fmt::format("{} (the only peer on that host is rank {})", cause, same_host[0]);
  }
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

// One process: every collective is the identity (allgather a copy), and no
// device or socket is created, so standalone runs need no network at all.
class SoloCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduceSum(float*, size_t) override {}
  void allreduceSumOnce(float*, size_t) override {}
  void allreduceSum16(void*, size_t, WireDtype) override {}
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
};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::Context> context, const CommunicatorOptions& options,
                   std::vector<std::string> peer_addresses)
      : context_(std::move(context)), options_(options), peer_addresses_(std::move(peer_addresses)) {}

  ~GlooCommunicator() override {
    // Gloo treats a peer's EOF as an error for every wait on that pair, even
    // when the awaited data already arrived. A fast rank closing its sockets
    // right after the last collective would thus fail a slower rank still
    // finishing it. On a normal exit, first wait until every rank has stopped
    // issuing collectives; skip that when broken or unwinding from an error,
    // where peers may never arrive and closing at once tells them sooner.
    if (broken_.empty() && std::uncaught_exceptions() == 0) {
      try {
        gloo::BarrierOptions opts(context_);
        opts.setTag(kClosingBarrierTag);
        opts.setTimeout(options_.timeout);
        gloo::barrier(opts);
      } catch (...) {
        // Closing anyway; a peer that failed here has its own error to report.
      }
    }
    // Algorithms hold buffers registered on the context's pairs; they must go
    // before the pairs do.
    algorithms_.clear();
  }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }

  void allreduceSum(float* data, size_t count) override {
    TANDEM_ENFORCE(count <= static_cast<size_t>(INT_MAX), "allreduce of {} floats exceeds Gloo's int count",
                   count);
    guarded([&] { return fmt::format("allreduce of {} floats", count); },
            [&] {
              if (count == 0) return;
              allreduceAlgorithm(data, count).run();
            });
  }

  void allreduceSumOnce(float* data, size_t count) override {
    guarded([&] { return fmt::format("allreduce of {} floats", count); },
            [&] {
              if (count == 0) return;
              gloo::AllreduceOptions opts(context_);
              opts.setOutput(data, count);
              opts.setReduceFunction(
                  static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
              opts.setTimeout(options_.timeout);
              gloo::allreduce(opts);
            });
  }

  void allreduceSum16(void* data, size_t count, WireDtype dtype) override {
    TANDEM_ENFORCE(dtype != WireDtype::kFloat32, "allreduceSum16 of float32 values");
    TANDEM_ENFORCE(count <= static_cast<size_t>(INT_MAX), "allreduce of {} values exceeds Gloo's int count", count);
    guarded([&] { return fmt::format("allreduce of {} {} values", count, wireDtypeName(dtype)); },
            [&] {
              if (count == 0) return;
              if (dtype == WireDtype::kFloat16) {
                allreduceAlgorithm(static_cast<Wire16<WireDtype::kFloat16>*>(data), count).run();
              } else {
                allreduceAlgorithm(static_cast<Wire16<WireDtype::kBfloat16>*>(data), count).run();
              }
            });
  }

  void broadcast(void* data, size_t bytes, int root) override {
    checkRoot(root, options_.size);
    guarded([&] { return fmt::format("broadcast of {} bytes from rank {}", bytes, root); },
            [&] {
              if (bytes == 0) return;
              gloo::BroadcastOptions opts(context_);
              opts.setOutput(static_cast<char*>(data), bytes);
              opts.setRoot(root);
              opts.setTimeout(options_.timeout);
              gloo::broadcast(opts);
            });
  }

  void allgather(const void* in, void* out, size_t bytes) override {
    guarded([&] { return fmt::format("allgather of {} bytes per rank", bytes); },
            [&] {
              if (bytes == 0) return;
              gloo::AllgatherOptions opts(context_);
              char* out_bytes = static_cast<char*>(out);
              // Gloo copies `in` into its slot of `out`; when the caller already
              // put it there, skip the input and let Gloo work in place.
              if (in != out_bytes + static_cast<size_t>(options_.rank) * bytes) {
                // Gloo's unbound buffers take a non-const pointer but only read the input.
                opts.setInput(static_cast<char*>(const_cast<void*>(in)), bytes);
              }
              opts.setOutput(out_bytes, bytes * static_cast<size_t>(options_.size));
              opts.setTimeout(options_.timeout);
              gloo::allgather(opts);
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
              gloo::AlltoallvOptions opts(context_);
              // Gloo's unbound buffers take a non-const pointer but only read the input.
              opts.setInput(total_in > 0 ? static_cast<char*>(const_cast<void*>(in)) : &empty, counts(send_bytes));
              opts.setOutput(total_out > 0 ? static_cast<char*>(out) : &empty, counts(recv_bytes));
              opts.setTimeout(options_.timeout);
              gloo::alltoallv(opts);
            });
  }

  void barrier() override {
    guarded([] { return std::string("barrier"); },
            [&] {
              gloo::BarrierOptions opts(context_);
              opts.setTimeout(options_.timeout);
              gloo::barrier(opts);
            });
  }

 private:
  // Buffer, count and element type (its size and sum): a float buffer and a
  // 16-bit one at one address are different algorithms.
  using Key = std::tuple<const void*, size_t, const void*>;
  struct Cached {
    std::unique_ptr<gloo::Algorithm> algorithm;
    size_t bytes = 0;
  };

  template <class T>
  gloo::Algorithm& allreduceAlgorithm(T* data, size_t count) {
    const Key key{data, count, gloo::ReductionFunction<T>::sum};
    if (auto it = algorithms_.find(key); it != algorithms_.end()) return *it->second.algorithm;

    const size_t bytes = count * sizeof(T);
    if (algorithms_.size() >= kMaxCachedAlgorithms || cached_bytes_ + bytes > kMaxCachedBytes) {
      algorithms_.clear();
      cached_bytes_ = 0;
    }
    const std::vector<T*> ptrs{data};
    const int n = static_cast<int>(count);
    std::unique_ptr<gloo::Algorithm> algorithm;
    // Halving-doubling needs ~2 log2(n) rounds against ring's 2(n-1), which
    // wins while latency dominates; ring-chunked pipelines big buffers.
    if (allreduceAlgorithmForBytes(bytes, options_) == AllreduceAlgorithm::kRingChunked) {
      algorithm = std::make_unique<gloo::AllreduceRingChunked<T>>(context_, ptrs, n);
    } else {
      algorithm = std::make_unique<gloo::AllreduceHalvingDoubling<T>>(context_, ptrs, n);
    }
    auto& slot = algorithms_[key];
    slot.algorithm = std::move(algorithm);
    slot.bytes = bytes;
    cached_bytes_ += bytes;
    return *slot.algorithm;
  }

  // Runs one collective. A failure mid-collective leaves peers and Gloo's
  // slots in an unknown state, so the communicator refuses all later calls
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
    } catch (const std::exception& e) {  // gloo::IoException, gloo::EnforceNotMet, ...
      cause = e.what();
    } catch (...) {
      cause = "unknown exception";
    }
    const std::string message = fmt::format("{} failed on rank {} of {} (peer timeout {} ms): {}", describe(),
                                            options_.rank, options_.size, options_.timeout.count(),
                                            namePeers(cause, peer_addresses_));
    broken_ = message;
    // Buffers of an aborted algorithm may still be referenced by in-flight
    // transport work; keep them alive until the communicator itself goes.
    throw PeerError(message);
  }

  static std::vector<int64_t> counts(const std::vector<size_t>& bytes) {
    return std::vector<int64_t>(bytes.begin(), bytes.end());
  }

  std::shared_ptr<gloo::Context> context_;
  CommunicatorOptions options_;
  std::vector<std::string> peer_addresses_;  // by rank, to name peers in errors
  std::map<Key, Cached> algorithms_;
  size_t cached_bytes_ = 0;
  std::string broken_;  // empty while usable; else the failure that broke it
};

}  // namespace

AllreduceAlgorithm allreduceAlgorithmFor(size_t count, const CommunicatorOptions& options) {
  return allreduceAlgorithmForBytes(count * sizeof(float), options);
}

AllreduceAlgorithm allreduceAlgorithmForBytes(size_t bytes, const CommunicatorOptions& options) {
  return bytes >= options.ring_threshold_bytes ? AllreduceAlgorithm::kRingChunked
                                                                : AllreduceAlgorithm::kHalvingDoubling;
}

std::unique_ptr<Communicator> Communicator::connect(gloo::rendezvous::Store& store,
                                                    const CommunicatorOptions& options) {
  checkArguments(options);
  if (options.size == 1) return std::make_unique<SoloCommunicator>();
  ignoreSigpipe();

  std::shared_ptr<gloo::transport::Device> device;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.local_host;
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    // Binding a local address involves no peer: this is a configuration error.
    throw Error(fmt::format("rank {}: cannot create a TCP device on local host '{}': {}", options.rank,
                            options.local_host, e.what()));
  }

  auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
  // Must precede connectFullMesh: pairs copy the timeout when they are created.
  context->setTimeout(options.timeout);
  std::vector<std::string> peer_addresses;
  try {
    context->connectFullMesh(store, device);
    peer_addresses = exchangePeerAddresses(context, options.timeout);
  } catch (const std::exception& e) {
    throw PeerError(fmt::format("connect (full-mesh rendezvous) failed on rank {} of {} at {} (peer timeout {} ms): {}",
                                options.rank, options.size, options.local_host, options.timeout.count(), e.what()));
  }
  return std::make_unique<GlooCommunicator>(std::move(context), options, std::move(peer_addresses));
}

}  // namespace tandem::collective
