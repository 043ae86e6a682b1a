#pragma once
// Harness for ParameterServer tests, in-process: the server runs serve() on its own
// thread, and each simulated worker is its own DEALER socket (so the server
// sees distinct routing ids) that can hold several requests in flight. That
// lets a test show that a reply is *held back* (a pull before the last push,
// a clock before the slowest worker) and then released. Every wait is bounded
// by a deadline, so a server bug fails a test instead of hanging it.
#include <gtest/gtest.h>
#include <zmq.hpp>

#include <atomic>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "net/job_security.hpp"
#include "core/clock.hpp"
#include "core/deadline.hpp"
#include "core/error.hpp"
#include "net/frame.hpp"
#include "net/request_client.hpp"
#include "ps/key_layout.hpp"
#include "optim/kernels.hpp"
#include "ps/messages.hpp"
#include "ps/protocol.hpp"
#include "ps/server.hpp"
#include "support/test_security.hpp"

namespace tandem::ps::testing {

using namespace std::chrono_literals;
using Ms = std::chrono::milliseconds;
using net::Frame;
using net::FrameHeader;
using net::MessageType;

// A reply that must come gets this long: far beyond what any of them needs.
constexpr Ms kReplyBudget = 2000ms;
// How long a test watches for a reply that must NOT come yet.
constexpr Ms kQuiet = 60ms;
constexpr uint64_t kFingerprint = 0xF00DCAFE12345678ULL;

// ParameterServer::serve() on a thread. The destructor aborts and joins, so a
// failing test never leaves the thread behind.
class RunningServer {
 public:
  explicit RunningServer(ServerOptions options) : server_(std::move(options), tandem::testing::testSecurity()) {
    result_ = promise_.get_future();
    thread_ = std::thread([this] {
      try {
        promise_.set_value(server_.serve(&abort_));
      } catch (...) {
        promise_.set_exception(std::current_exception());
      }
    });
  }
  ~RunningServer() {
    abort_ = true;
    thread_.join();
  }

  std::string endpoint() const { return net::tcpEndpoint("127.0.0.1", server_.port()); }
  int port() const { return server_.port(); }

  // Whether serve() has returned (or thrown) within `budget`.
  bool finishes(Ms budget) { return result_.wait_for(budget) == std::future_status::ready; }
  // serve()'s summary; rethrows what serve() threw. Fails the test, by
  // throwing, if serve() has not returned within `budget`.
  nlohmann::json summary(Ms budget = kReplyBudget) {
    if (!finishes(budget)) throw std::runtime_error("serve() did not return in time");
    return result_.get();
  }

 private:
  ParameterServer server_;
  std::atomic<bool> abort_{false};
  std::promise<nlohmann::json> promise_;
  std::future<nlohmann::json> result_;
  std::thread thread_;
};

// One DEALER socket: a simulated worker, or a misbehaving client. Requests
// get ids 1, 2, ...; replies are matched by id and ones not asked for yet
// are kept, so several requests may be outstanding at once.
class Peer {
 public:
  Peer(zmq::context_t& context, const std::string& endpoint) : socket_(context, zmq::socket_type::dealer) {
    net::configureSocket(socket_);
    net::secureClient(socket_, tandem::testing::testSecurity());
    socket_.connect(endpoint);
  }

  uint64_t send(FrameHeader header, const void* data = nullptr, size_t size = 0) {
    header.request_id = next_id_++;
    if (!net::sendFrame(socket_, header, net::copyPayload(data, size))) {
      throw std::runtime_error("DEALER refused a send");
    }
    return header.request_id;
  }
  template <class T>
  uint64_t send(FrameHeader header, const std::vector<T>& payload) {
    return send(header, payload.data(), payload.size() * sizeof(T));
  }

  // Closes the connection, as a worker does after its goodbye: the server
  // closes once every worker that said goodbye has hung up.
  void hangUp() { socket_.close(); }

  // Sends the given parts as one multipart message, byte for byte.
  void sendRaw(const std::vector<std::vector<char>>& parts) {
    for (size_t i = 0; i < parts.size(); ++i) {
      zmq::message_t part(parts[i].data(), parts[i].size());
      auto flags = i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      if (!socket_.send(part, flags | zmq::send_flags::dontwait)) throw std::runtime_error("DEALER refused a send");
    }
  }

  // Whether the reply to `id` arrives within `watch` (it is kept for await).
  bool answered(uint64_t id, Ms watch = kQuiet) {
    const Deadline deadline = Deadline::after(watch);
    while (!stash_.count(id)) {
      if (!receiveOne(deadline)) return false;
    }
    return true;
  }

  // The reply to `id`; throws (failing the test) if it does not come in time.
  Frame await(uint64_t id, Ms budget = kReplyBudget) {
    if (!answered(id, budget)) {
      throw std::runtime_error("no reply to request " + std::to_string(id) + " within " +
                               formatDuration(budget));
    }
    Frame f = std::move(stash_.at(id));
    stash_.erase(id);
    return f;
  }

  Frame request(FrameHeader header, const void* data = nullptr, size_t size = 0) {
    return await(send(header, data, size));
  }
  template <class T>
  Frame request(FrameHeader header, const std::vector<T>& payload) {
    return await(send(header, payload));
  }

 private:
  bool receiveOne(Deadline deadline) {
    std::vector<zmq::message_t> parts;
    while (!deadline.expired()) {
      if (!net::waitReadable(socket_, deadline.remaining())) continue;
      const size_t total = net::receiveParts(socket_, parts, 2);
      if (total == 0) continue;
      Frame f = net::decodeFrame(parts, total, net::kMaxPayloadBytes, "the server", ps::kMessages);
      const uint64_t id = f.header.request_id;
      if (stash_.count(id)) throw std::runtime_error("two replies to request " + std::to_string(id));
      stash_.emplace(id, std::move(f));
      return true;
    }
    return false;
  }

  zmq::socket_t socket_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Frame> stash_;
};

// --- protocol helpers -------------------------------------------------------

// Chunk c's initial values in `layout`: 10 c + i, so misplaced chunks show.
inline std::vector<float> initial(const KeyLayout& layout, size_t c) {
  std::vector<float> v(static_cast<size_t>(layout.chunks[c].length));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(10 * c + i);
  return v;
}

inline std::vector<float> floatsOf(const Frame& f) {
  std::vector<float> out(f.payload.size() / sizeof(float));
  std::memcpy(out.data(), f.payload.data(), out.size() * sizeof(float));
  return out;
}

inline void expectOk(const Frame& f) {
  EXPECT_EQ(f.header.type, MessageType::kOk) << "reply: " << ps::kMessages.nameOf(f.header.type) << " " << f.text();
}

inline void expectError(const Frame& f, const std::string& phrase) {
  EXPECT_EQ(f.header.type, MessageType::kError) << ps::kMessages.nameOf(f.header.type);
  EXPECT_NE(f.text().find(phrase), std::string_view::npos) << "'" << f.text() << "' lacks '" << phrase << "'";
}

// Bit-exact: the server must compute exactly what the kernels compute.
inline void expectBitEqual(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0) << "element " << i << ": " << got[i] << " vs " << want[i];
  }
}

// A worker's goodbye, then its hang-up, as PsStrategy::finish does.
inline void sayGoodbye(Peer& worker) {
  expectOk(worker.request({.type = ps::msg::kDone}));
  worker.hangUp();
}

inline StepAgreement agreementOf(const Frame& f) {
  EXPECT_EQ(f.header.type, ps::msg::kAgreement) << ps::kMessages.nameOf(f.header.type) << " " << f.text();
  return decodeStepAgreement(f.bytes(), "the server");
}

inline FrameHeader header(MessageType type, uint64_t key = 0, uint32_t clock = 0) {
  return {.type = type, .clock = clock, .key_begin = key, .key_end = key + 1};
}

inline uint64_t push(Peer& p, uint64_t key, uint32_t step, const std::vector<float>& grad) {
  return p.send(header(ps::msg::kPush, key, step), grad);
}
inline uint64_t pull(Peer& p, uint64_t key, uint32_t clock) { return p.send(header(ps::msg::kPull, key, clock)); }
inline uint64_t reportClock(Peer& p, uint32_t step, const StepReport& report) {
  return p.send({.type = ps::msg::kClock, .clock = step}, encode(report));
}
inline Frame hello(Peer& p, uint32_t worker, uint64_t fingerprint = kFingerprint, uint64_t generation = 0) {
  return p.request({.type = ps::msg::kHello}, encode(Hello{worker, fingerprint, generation}));
}

// Deterministic, non-round values so that the order of float operations shows.
inline std::vector<float> pattern(int64_t n, float scale, float offset) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = offset + scale * static_cast<float>(i + 1) / 3.0f;
  return v;
}

inline ServerConfig makeConfig(Mode mode, int workers, std::vector<ChunkRange> chunks) {
  ServerConfig c;
  c.mode = mode;
  c.workers = workers;
  c.lr_by_step = {0.5, 0.25};
  c.layout_fingerprint = kFingerprint;
  c.chunks = std::move(chunks);
  c.peer_timeout_s = 5;
  return c;
}

// What the chief sends each server of `layout`: its chunks, `mode` among
// `workers`, SGD at 0.5, and the layout's fingerprint.
inline std::vector<ServerConfig> configsFor(const KeyLayout& layout, Mode mode, WireDtype wire, int workers,
                                            uint64_t total_steps) {
  std::vector<ServerConfig> out;
  for (size_t i = 0; i < layout.server_floats.size(); ++i) {
    ServerConfig c = makeConfig(mode, workers, {});
    c.layout_fingerprint = layout.fingerprint();
    c.total_steps = total_steps;
    c.wire = wire;
    for (const auto& chunk : layout.chunksHeldBy(static_cast<int>(i))) {
      c.chunks.push_back({chunk.key, chunk.length});
      if (chunk.backup == static_cast<int>(i)) c.backup_chunks.push_back(chunk.key);
    }
    c.replicas = layout.replicas();
    out.push_back(c);
  }
  return out;
}

class PsServer : public ::testing::Test {
 protected:
  // Starts the server; unless `initialize` is false, initialises it as the
  // chief would (kPsInit, then kPsSet of every chunk's `initial` values)
  // through a net::RequestClient, the same blocking client the chief uses.
  void start(const ServerConfig& config, ServerOptions options = {}, bool initialize = true) {
    config_ = config;
    options.bind_host = "127.0.0.1";
    options.port = 0;
    server_ = std::make_unique<RunningServer>(options);
    if (initialize) init();
  }

  void init() {
    net::RequestClient chief(context_, server_->endpoint(), "ps 0", ps::kMessages, tandem::testing::testSecurity());
    const std::string json = toJson(config_).dump();
    auto reply = chief.request({.type = ps::msg::kInit}, net::copyPayload(json), Deadline::after(kReplyBudget));
    ASSERT_TRUE(reply.has_value()) << "no reply to ps-init";
    expectOk(*reply);
    for (const auto& r : config_.chunks) {
      const auto values = initial(r);
      reply = chief.request(header(ps::msg::kSet, r.key), net::copyPayload(values.data(), values.size() * 4),
                            Deadline::after(kReplyBudget));
      ASSERT_TRUE(reply.has_value()) << "no reply to ps-set " << r.key;
      expectOk(*reply);
    }
  }

  static std::vector<float> initial(const ChunkRange& r) {
    return pattern(r.length, 0.7f, static_cast<float>(r.key) - 0.35f);
  }

  // A fresh DEALER; hello'd as `worker` unless worker < 0.
  Peer worker(int worker = -1) {
    Peer p(context_, server_->endpoint());
    if (worker >= 0) expectOk(hello(p, static_cast<uint32_t>(worker)));
    return p;
  }

  // Sockets (declared in tests, destroyed first) close before the context.
  zmq::context_t context_{1};
  ServerConfig config_;
  std::unique_ptr<RunningServer> server_;
};

// --- 1. sync push/pull ------------------------------------------------------

}  // namespace tandem::ps::testing
