#include "cluster/coordinator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "cluster/local_address.hpp"
#include "cluster/quorum_messages.hpp"
#include "cluster/store_messages.hpp"
#include "core/error.hpp"
#include "core/log_limiter.hpp"
#include "core/logging.hpp"
#include "net/frame.hpp"
#include "net/job_security.hpp"
#include "net/request_client.hpp"
#include "net/wire.hpp"

namespace tandem::cluster {
namespace {

using net::Frame;
using net::FrameHeader;
using net::MessageType;

// Keys are names, not data: a bound keeps a bad client from filling memory
// through the key index alone.
constexpr size_t kMaxKeyBytes = 4096;
// Short enough that destroying the server is prompt, long enough not to spin.
constexpr std::chrono::milliseconds kServerPollInterval{20};
// Retry pacing for keys that are not there yet.
constexpr std::chrono::milliseconds kFirstRetry{5};
constexpr std::chrono::milliseconds kMaxRetry{20};

// A poll that starts just before its deadline still gets a round trip.
constexpr std::chrono::milliseconds kMinRoundTrip{100};

void checkKey(const std::string& key) {
  if (key.empty()) throw InputError("store key is empty");
  if (key.size() > kMaxKeyBytes) {
    throw InputError(fmt::format("store key '{}...' is {} bytes (limit {})", key.substr(0, 64), key.size(),
                                 kMaxKeyBytes));
  }
}

std::string quoteKeys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 8;
  std::string out;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) {
    if (i) out += ", ";
    out += fmt::format("'{}'", keys[i]);
  }
  if (keys.size() > kShown) out += fmt::format(" and {} more", keys.size() - kShown);
  return out;
}

// The sender's IP as ZeroMQ saw it, to name it in errors.
std::string peerAddress(zmq::message_t& message) {
  try {
    std::string_view address = message.gets("Peer-Address");
    // A dual-stack (IPv6) listener sees IPv4 peers IPv4-mapped.
    if (address.starts_with("::ffff:") && address.find('.') != std::string_view::npos) address.remove_prefix(7);
    return std::string(address);
  } catch (const zmq::error_t&) {
    return "unknown peer";
  }
}

}  // namespace

// ---------------------------------------------------------------- server

struct CoordinatorServer::Impl {
  zmq::context_t context{1};
  std::unique_ptr<net::ZapHandler> zap;  // admits the job's members; outlives the socket
  zmq::socket_t socket{context, zmq::socket_type::router};
  int port = 0;
  std::atomic<bool> stop{false};
  LogLimiter reject_log;  // the server thread's; bounds what a peer can make it log
  size_t stored_bytes = 0;  // keys and values, against kMaxStoreBytes
  // Only the server thread touches the store. Values are shared and
  // immutable so a get reply can send them without a copy while a later set
  // replaces the entry.
  std::map<std::string, std::shared_ptr<const std::vector<char>>, std::less<>> store;
  std::mutex quorum_mu;  // hostQuorum may come while the thread serves
  std::optional<Quorum> quorum;
  int64_t logged_generation = 0;
  std::thread thread;

  std::pair<MessageType, zmq::message_t> answerQuorum(const Frame& request, const std::string& peer);
  QuorumView hostQuorum(int workers, int64_t first_step, const QuorumOptions& options, QuorumTime now);

  void run();
  void handle(std::vector<zmq::message_t>& parts, size_t total);
  std::pair<MessageType, zmq::message_t> apply(const Frame& request, const std::string& peer);
};

CoordinatorServer::CoordinatorServer(const std::string& bind_host, int port, const net::JobSecurity& security)
    : impl_(std::make_unique<Impl>()) {
  if (port < 0 || port > 65535) {
    throw InputError(fmt::format("coordinator port {} is out of range 0..65535", port));
  }
  // A host name cannot be bound directly: the address it names here.
  const std::string address = bindableAddress(bind_host);
  std::string endpoint = net::tcpEndpoint(address, port == 0 ? -1 : port);
  // A message larger than any value the store takes is dropped unread.
  net::configureSocket(impl_->socket, kMaxStoreValueBytes + (64 << 10), net::isIpv6(address));
  impl_->zap = net::secureServer(impl_->context, impl_->socket, "the coordinator", security);
  try {
    impl_->socket.bind(endpoint);
  } catch (const zmq::error_t& e) {
    if (e.num() == EADDRNOTAVAIL) {
      throw InputError(fmt::format("coordinator could not listen on {}: {} is not an address of this machine",
                                   endpoint, address));
    }
    throw Error(fmt::format("coordinator could not listen on {}: {}", endpoint, e.what()));
  }
  // The kernel's choice when port was 0; "tcp://1.2.3.4:5678" either way.
  std::string bound = impl_->socket.get(zmq::sockopt::last_endpoint);
  auto colon = bound.rfind(':');
  int actual = 0;
  if (colon == std::string::npos ||
      std::from_chars(bound.data() + colon + 1, bound.data() + bound.size(), actual).ec != std::errc()) {
    throw Error(fmt::format("coordinator bound {} but cannot read its port from '{}'", endpoint, bound));
  }
  impl_->port = actual;
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
}

CoordinatorServer::~CoordinatorServer() {
  impl_->stop = true;
  if (impl_->thread.joinable()) impl_->thread.join();
}

int CoordinatorServer::port() const { return impl_->port; }

void CoordinatorServer::hostQuorum(int workers, int64_t first_step, const QuorumOptions& options) {
  impl_->hostQuorum(workers, first_step, options, std::chrono::steady_clock::now());
}

QuorumView CoordinatorServer::Impl::hostQuorum(int workers, int64_t first_step, const QuorumOptions& options,
                                               QuorumTime now) {
  std::lock_guard lock(quorum_mu);
  // The first request forms it; a chief that started again finds it.
  if (!quorum) quorum.emplace(workers, first_step, options, now);
  return quorum->poll(now);
}

std::pair<MessageType, zmq::message_t> CoordinatorServer::Impl::answerQuorum(const Frame& request,
                                                                            const std::string& peer) {
  const std::string what = kStoreMessages.nameOf(request.header.type) + " payload";
  const QuorumRequest r = decodeQuorumRequest(request.bytes(), peer, what);
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(quorum_mu);
  if (!quorum) {
    throw InputError(fmt::format("{} from {}: this job's membership is fixed (its coordinator hosts no quorum)",
                                 kStoreMessages.nameOf(request.header.type), peer));
  }
  if (request.header.type == store_msg::kQuorumBeat) {
    quorum->heartbeat(r.worker, now);
  } else if (request.header.type == store_msg::kQuorumArrive) {
    quorum->arrive(r.worker, r.generation, r.step, now);
  } else {
    quorum->leave(r.worker, now);
  }
  const QuorumView view = quorum->poll(now);
  if (view.current.generation != logged_generation) {
    logged_generation = view.current.generation;
    std::string departed;
    for (const auto& d : view.current.departed) departed += fmt::format("; {} left ({})", taskName(Role::kWorker, d.worker), d.why);
    TANDEM_LOG_INFO("membership generation {}: {} worker(s) from step {}{}", view.current.generation,
                    view.current.size(), view.current.step, departed);
  }
  return {store_msg::kQuorumView, net::copyPayload(encodeQuorumView(view))};
}

void CoordinatorServer::Impl::run() {
  std::vector<zmq::message_t> parts;
  while (!stop) {
    try {
      if (!net::waitReadable(socket, kServerPollInterval)) continue;
      // [routing id][header][payload]; keep one extra part to notice extras.
      while (!stop) {
        size_t total = net::receiveParts(socket, parts, 4);
        if (total == 0) break;
        handle(parts, total);
      }
    } catch (const std::exception& e) {
      // Socket-level failure: nothing more can be served. Clients will time
      // out naming the coordinator.
      TANDEM_LOG_ERROR("coordinator stopped serving: {}", e.what());
      return;
    }
  }
}

void CoordinatorServer::Impl::handle(std::vector<zmq::message_t>& parts, size_t total) {
  zmq::message_t& routing_id = parts[0];
  if (parts.size() < 2) return;  // an empty message carries nothing to answer
  std::string peer = peerAddress(parts[1]);
  uint64_t request_id = net::salvageRequestId(parts[1].data(), parts[1].size());
  MessageType reply_type;
  zmq::message_t reply;
  try {
    Frame request = net::decodeFrame(std::span(parts).subspan(1), total - 1, net::kMaxPayloadBytes, peer, kStoreMessages);
    request_id = request.header.request_id;
    std::tie(reply_type, reply) = apply(request, peer);
  } catch (const std::exception& e) {
    // A bad request costs its sender an error reply, nothing more.
    if (uint64_t more = 0; reject_log.allow(peer, more)) {
      TANDEM_LOG_WARN("coordinator rejected a request from {}: {}{}", peer, e.what(), reject_log.suppressedText(more));
    }
    reply_type = MessageType::kError;
    reply = net::copyPayload(std::string_view(e.what()));
  }
  FrameHeader header;
  header.type = reply_type;
  header.request_id = request_id;
  // ROUTER never blocks: a reply to a vanished peer is dropped.
  net::sendFrame(socket, header, std::move(reply), &routing_id);
}

std::pair<MessageType, zmq::message_t> CoordinatorServer::Impl::apply(const Frame& request, const std::string& peer) {
  std::string what = kStoreMessages.nameOf(request.header.type) + " payload";
  net::PayloadReader reader(request.bytes(), peer, what);
  switch (net::code(request.header.type)) {
    case net::code(store_msg::kSet): {
      std::string key(reader.string("key"));
      checkKey(key);
      auto value = reader.rest();
      const auto old = store.find(key);
      const size_t replaced = old == store.end() ? 0 : old->first.size() + old->second->size();
      if (value.size() > kMaxStoreValueBytes) {
        throw InputError(fmt::format("store value for '{}' is {} bytes; the store takes at most {} per value", key,
                                     value.size(), kMaxStoreValueBytes));
      }
      if (old == store.end() && store.size() >= kMaxStoreKeys) {
        throw InputError(fmt::format("the store is full: {} keys, the most it holds", kMaxStoreKeys));
      }
      if (stored_bytes - replaced + key.size() + value.size() > kMaxStoreBytes) {
        throw InputError(fmt::format("the store is full: {} of {} bytes used, '{}' needs {} more", stored_bytes,
                                     kMaxStoreBytes, key, key.size() + value.size()));
      }
      stored_bytes += key.size() + value.size() - replaced;
      store.insert_or_assign(key, std::make_shared<const std::vector<char>>(
                                      reinterpret_cast<const char*>(value.data()),
                                      reinterpret_cast<const char*>(value.data()) + value.size()));
      return {MessageType::kOk, zmq::message_t()};
    }
    case net::code(store_msg::kGet): {
      auto it = store.find(request.text());
      if (it == store.end()) return {store_msg::kNotFound, zmq::message_t()};
      return {store_msg::kValue, net::sharedPayload(it->second)};
    }
    case net::code(store_msg::kCheck): {
      auto keys = reader.strings("keys");
      reader.expectEnd();
      std::vector<std::string> missing;
      for (auto& k : keys) {
        if (!store.contains(k)) missing.push_back(std::move(k));
      }
      if (missing.empty()) return {MessageType::kOk, zmq::message_t()};
      net::PayloadWriter writer;
      writer.putStrings(missing);
      const auto& bytes = writer.bytes();
      return {store_msg::kNotFound, net::copyPayload(bytes)};
    }
    case net::code(store_msg::kQuorumHost): {
      const QuorumHosting h = decodeQuorumHosting(request.bytes(), peer);
      const QuorumView view = hostQuorum(h.workers, h.first_step, h.options, std::chrono::steady_clock::now());
      return {store_msg::kQuorumView, net::copyPayload(encodeQuorumView(view))};
    }
    case net::code(store_msg::kQuorumBeat):
    case net::code(store_msg::kQuorumArrive):
    case net::code(store_msg::kQuorumLeave):
      return answerQuorum(request, peer);
    default:
      break;  // replies and parameter-server messages are not store requests
  }
  throw InputError(fmt::format("frame from {}: {} is not a request the coordinator serves", peer,
                               kStoreMessages.nameOf(request.header.type)));
}

// ---------------------------------------------------------------- client

struct CoordinatorClient::Impl {
  HostPort address;
  std::string name;
  std::chrono::milliseconds timeout;
  zmq::context_t context{1};
  net::RequestClient client;

  Impl(HostPort addr, std::chrono::milliseconds t, const net::JobSecurity& security, const std::string& host)
      : address(std::move(addr)),
        name(fmt::format("coordinator ({}) at {}", host, address.str())),
        timeout(t),
        client(context, net::tcpEndpoint(address.host, address.port), name, kStoreMessages, security) {}

  // One round trip. `budget` is what the caller was given in all, for the
  // message. Throws PeerError if no reply came by `deadline`, Error if the
  // coordinator rejected the request.
  Frame call(MessageType type, zmq::message_t payload, Deadline deadline, std::chrono::milliseconds budget) {
    FrameHeader header;
    header.type = type;
    auto reply = client.request(header, std::move(payload), deadline);
    if (!reply) throw PeerError(fmt::format("{} did not answer within {}", name, formatDuration(budget)));
    if (reply->header.type == MessageType::kError) {
      std::string reason(reply->text().substr(0, 1000));
      throw Error(fmt::format("{} rejected a {} request: {}", name, kStoreMessages.nameOf(type), reason));
    }
    return std::move(*reply);
  }

  [[noreturn]] void unexpected(const Frame& reply, MessageType request) {
    throw Error(fmt::format("{} answered a {} request with {}", name, kStoreMessages.nameOf(request),
                            kStoreMessages.nameOf(reply.header.type)));
  }

  std::optional<std::vector<char>> tryGet(const std::string& key, Deadline deadline,
                                          std::chrono::milliseconds budget) {
    checkKey(key);
    Frame reply = call(store_msg::kGet, net::copyPayload(key), deadline, budget);
    if (reply.header.type == store_msg::kNotFound) return std::nullopt;
    if (reply.header.type != store_msg::kValue) unexpected(reply, store_msg::kGet);
    const char* data = static_cast<const char*>(reply.payload.data());
    return std::vector<char>(data, data + reply.payload.size());
  }

  std::vector<std::string> missingKeys(const std::vector<std::string>& keys, Deadline deadline,
                                       std::chrono::milliseconds budget) {
    if (keys.empty()) return {};
    net::PayloadWriter writer;
    for (const auto& k : keys) checkKey(k);
    writer.putStrings(keys);
    const auto& bytes = writer.bytes();
    Frame reply = call(store_msg::kCheck, net::copyPayload(bytes), deadline, budget);
    if (reply.header.type == MessageType::kOk) return {};
    if (reply.header.type != store_msg::kNotFound) unexpected(reply, store_msg::kCheck);
    net::PayloadReader reader(reply.bytes(), name, "store-not-found payload");
    auto missing = reader.strings("keys");
    reader.expectEnd();
    // Only keys we asked about are believable.
    std::set<std::string_view> asked(keys.begin(), keys.end());
    for (const auto& m : missing) {
      if (!asked.contains(m)) {
        throw InputError(fmt::format("frame from {}: store-check reply names key '{}' that was not asked about",
                                     name, m.substr(0, 64)));
      }
    }
    return missing;
  }

  void set(const std::string& key, const std::vector<char>& data, Deadline deadline,
           std::chrono::milliseconds budget) {
    checkKey(key);
    if (data.size() > kMaxStoreValueBytes) {
      throw InputError(fmt::format("value for store key '{}' is {} bytes; the limit is {}", key, data.size(),
                                   net::formatBytes(kMaxStoreValueBytes)));
    }
    net::PayloadWriter writer;
    writer.putString(key);
    writer.putRaw(data.data(), data.size());
    const auto& bytes = writer.bytes();
    Frame reply = call(store_msg::kSet, net::copyPayload(bytes), deadline, budget);
    if (reply.header.type != MessageType::kOk) unexpected(reply, store_msg::kSet);
  }

  QuorumView quorum(MessageType type, const QuorumRequest& request, Deadline deadline) {
    Frame reply = call(type, net::copyPayload(encodeQuorumRequest(request)), deadline, net::budgetOf(deadline));
    if (reply.header.type != store_msg::kQuorumView) unexpected(reply, type);
    return decodeQuorumView(reply.bytes(), name);
  }
};

CoordinatorClient::CoordinatorClient(HostPort coordinator, std::chrono::milliseconds timeout,
                                     const net::JobSecurity& security, const std::string& host)
    : impl_(std::make_unique<Impl>(std::move(coordinator), timeout, security, host)) {}

CoordinatorClient::~CoordinatorClient() = default;

const std::string& CoordinatorClient::coordinatorName() const { return impl_->name; }

void CoordinatorClient::set(const std::string& key, const std::vector<char>& data) {
  impl_->set(key, data, Deadline::after(impl_->timeout), impl_->timeout);
}

void CoordinatorClient::set(const std::string& key, const std::vector<char>& data, Deadline deadline) {
  impl_->set(key, data, deadline, net::budgetOf(deadline));
}

std::optional<std::vector<char>> CoordinatorClient::tryGet(const std::string& key) {
  return impl_->tryGet(key, Deadline::after(impl_->timeout), impl_->timeout);
}

std::vector<std::string> CoordinatorClient::missingKeys(const std::vector<std::string>& keys, Deadline deadline) {
  return impl_->missingKeys(keys, deadline, net::budgetOf(deadline));
}

std::vector<char> CoordinatorClient::get(const std::string& key) {
  auto deadline = Deadline::after(impl_->timeout);
  auto pause = kFirstRetry;
  while (true) {
    if (auto value = impl_->tryGet(key, deadline.atLeast(kMinRoundTrip), impl_->timeout)) return std::move(*value);
    if (deadline.expired()) {
      throw PeerError(fmt::format("{}: key '{}' did not appear within {}", impl_->name, key,
                                  formatDuration(impl_->timeout)));
    }
    std::this_thread::sleep_for(std::min(pause, deadline.remaining()));
    pause = std::min(pause * 2, kMaxRetry);
  }
}

QuorumView CoordinatorClient::quorumBeat(int worker, Deadline deadline) {
  return impl_->quorum(store_msg::kQuorumBeat, {worker, 0, -1}, deadline);
}

QuorumView CoordinatorClient::quorumArrive(int worker, int64_t generation, int64_t step, Deadline deadline) {
  return impl_->quorum(store_msg::kQuorumArrive, {worker, generation, step}, deadline);
}

QuorumView CoordinatorClient::hostQuorum(int workers, int64_t first_step, const QuorumOptions& options,
                                         Deadline deadline) {
  Frame reply = impl_->call(store_msg::kQuorumHost,
                            net::copyPayload(encodeQuorumHosting({workers, first_step, options})), deadline,
                            net::budgetOf(deadline));
  if (reply.header.type != store_msg::kQuorumView) impl_->unexpected(reply, store_msg::kQuorumHost);
  return decodeQuorumView(reply.bytes(), impl_->name);
}

QuorumView CoordinatorClient::quorumLeave(int worker, Deadline deadline) {
  return impl_->quorum(store_msg::kQuorumLeave, {worker, 0, -1}, deadline);
}

std::chrono::milliseconds CoordinatorClient::timeout() const { return impl_->timeout; }

void CoordinatorClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  auto deadline = Deadline::after(timeout);
  auto pause = kFirstRetry;
  while (true) {
    auto missing = impl_->missingKeys(keys, deadline.atLeast(kMinRoundTrip), timeout);
    if (missing.empty()) return;
    if (deadline.expired()) {
      throw PeerError(fmt::format("{}: {} {} did not appear within {}", impl_->name,
                                  missing.size() == 1 ? "key" : "keys", quoteKeys(missing),
                                  formatDuration(timeout)));
    }
    std::this_thread::sleep_for(std::min(pause, deadline.remaining()));
    pause = std::min(pause * 2, kMaxRetry);
  }
}

}  // namespace tandem::cluster
