#include "net/frame.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace tandem::net {
namespace {

// Byte-wise so the wire format is little-endian whatever the host is.
template <class T>
void storeLe(std::byte* out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<std::byte>((value >> (8 * i)) & 0xFF);
}

template <class T>
T loadLe(const std::byte* in) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(static_cast<T>(in[i]) << (8 * i));
  return value;
}

constexpr size_t kMagicOffset = 0;
constexpr size_t kVersionOffset = 4;
constexpr size_t kTypeOffset = 6;
constexpr size_t kFlagsOffset = 8;
constexpr size_t kClockOffset = 12;
constexpr size_t kRequestIdOffset = 16;
constexpr size_t kKeyBeginOffset = 24;
constexpr size_t kKeyEndOffset = 32;
constexpr size_t kPayloadBytesOffset = 40;
static_assert(kPayloadBytesOffset + 8 == kFrameHeaderBytes);

[[noreturn]] void reject(std::string_view peer, const std::string& what) {
  throw InputError(fmt::format("frame from {}: {}", peer, what));
}

void releaseOwner(void* /*data*/, void* hint) {
  // Re-adopt the holder made in sharedPayload so it is freed exactly once.
  std::unique_ptr<std::shared_ptr<const void>> holder(static_cast<std::shared_ptr<const void>*>(hint));
}

}  // namespace

bool MessageCatalog::knows(MessageType type) const {
  if (type == MessageType::kError || type == MessageType::kOk) return true;
  return std::any_of(names_.begin(), names_.end(), [&](const MessageName& m) { return m.type == type; });
}

std::string MessageCatalog::nameOf(MessageType type) const {
  if (type == MessageType::kError) return "error";
  if (type == MessageType::kOk) return "ok";
  for (const MessageName& m : names_) {
    if (m.type == type) return std::string(m.name);
  }
  return fmt::format("type {}", static_cast<uint16_t>(type));
}

std::string formatBytes(uint64_t bytes) {
  if (bytes >= (uint64_t{1} << 30) && bytes % (uint64_t{1} << 30) == 0) return fmt::format("{} GiB", bytes >> 30);
  if (bytes >= (uint64_t{1} << 20) && bytes % (uint64_t{1} << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= (uint64_t{1} << 10) && bytes % (uint64_t{1} << 10) == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} bytes", bytes);
}

HeaderBytes encodeHeader(const FrameHeader& header) {
  HeaderBytes out{};
  storeLe<uint32_t>(out.data() + kMagicOffset, kFrameMagic);
  storeLe<uint16_t>(out.data() + kVersionOffset, kFrameVersion);
  storeLe<uint16_t>(out.data() + kTypeOffset, static_cast<uint16_t>(header.type));
  storeLe<uint32_t>(out.data() + kFlagsOffset, header.flags);
  storeLe<uint32_t>(out.data() + kClockOffset, header.clock);
  storeLe<uint64_t>(out.data() + kRequestIdOffset, header.request_id);
  storeLe<uint64_t>(out.data() + kKeyBeginOffset, header.key_begin);
  storeLe<uint64_t>(out.data() + kKeyEndOffset, header.key_end);
  storeLe<uint64_t>(out.data() + kPayloadBytesOffset, header.payload_bytes);
  return out;
}

FrameHeader validateHeader(const void* bytes, size_t size, uint64_t max_payload_bytes, std::string_view peer,
                           const MessageCatalog& protocol) {
  const auto* in = static_cast<const std::byte*>(bytes);
  // Magic first: a short message that is not ours at all is better reported
  // as "bad magic" than as a truncated header.
  if (size >= 4) {
    uint32_t magic = loadLe<uint32_t>(in + kMagicOffset);
    if (magic != kFrameMagic) reject(peer, fmt::format("bad magic 0x{:08x} (expected 0x{:08x})", magic, kFrameMagic));
  }
  if (size != kFrameHeaderBytes) {
    if (size < kFrameHeaderBytes) reject(peer, fmt::format("truncated header: {} of {} bytes", size, kFrameHeaderBytes));
    reject(peer, fmt::format("header of {} bytes (expected {})", size, kFrameHeaderBytes));
  }
  uint16_t version = loadLe<uint16_t>(in + kVersionOffset);
  if (version != kFrameVersion) {
    reject(peer, fmt::format("unsupported version {} (this build speaks {})", version, kFrameVersion));
  }
  uint16_t type = loadLe<uint16_t>(in + kTypeOffset);
  FrameHeader header;
  header.type = static_cast<MessageType>(type);
  if (!protocol.knows(header.type)) reject(peer, fmt::format("unknown message type {}", type));
  header.flags = loadLe<uint32_t>(in + kFlagsOffset);
  if ((header.flags & ~kKnownFrameFlags) != 0) {
    reject(peer, fmt::format("unknown flags 0x{:x} in a {} frame", header.flags & ~kKnownFrameFlags,
                             protocol.nameOf(header.type)));
  }
  header.clock = loadLe<uint32_t>(in + kClockOffset);
  header.request_id = loadLe<uint64_t>(in + kRequestIdOffset);
  header.key_begin = loadLe<uint64_t>(in + kKeyBeginOffset);
  header.key_end = loadLe<uint64_t>(in + kKeyEndOffset);
  if (header.key_begin > header.key_end) {
    reject(peer, fmt::format("key range [{}, {}) has begin after end", header.key_begin, header.key_end));
  }
  header.payload_bytes = loadLe<uint64_t>(in + kPayloadBytesOffset);
  if (header.payload_bytes > max_payload_bytes) {
    reject(peer, fmt::format("payload of {} bytes exceeds the {} limit", header.payload_bytes,
                             formatBytes(max_payload_bytes)));
  }
  return header;
}

void validatePayloadSize(const FrameHeader& header, size_t received_bytes, std::string_view peer,
                         const MessageCatalog& protocol) {
  if (header.payload_bytes != received_bytes) {
    reject(peer, fmt::format("{} header announces a payload of {} bytes but {} arrived",
                             protocol.nameOf(header.type), header.payload_bytes, received_bytes));
  }
}

uint64_t salvageRequestId(const void* bytes, size_t size) {
  const auto* in = static_cast<const std::byte*>(bytes);
  if (size < kFrameHeaderBytes || loadLe<uint32_t>(in + kMagicOffset) != kFrameMagic) return 0;
  return loadLe<uint64_t>(in + kRequestIdOffset);
}

zmq::message_t copyPayload(const void* data, size_t size) {
  if (size == 0) return zmq::message_t();
  return zmq::message_t(data, size);
}

zmq::message_t sharedPayload(std::shared_ptr<const void> owner, const void* data, size_t size) {
  if (size == 0) return zmq::message_t();
  // ZeroMQ carries only a raw hint to its free function, so the shared
  // owner rides in a heap holder that releaseOwner re-adopts.
  auto holder = std::make_unique<std::shared_ptr<const void>>(std::move(owner));
  zmq::message_t message(const_cast<void*>(data), size, &releaseOwner, holder.get());
  holder.release();  // now owned by the message
  return message;
}

zmq::message_t sharedPayload(std::shared_ptr<const std::vector<char>> bytes) {
  if (!bytes || bytes->empty()) return zmq::message_t();
  const void* data = bytes->data();
  size_t size = bytes->size();
  return sharedPayload(std::shared_ptr<const void>(std::move(bytes)), data, size);
}

OwnedBytes adoptPayload(zmq::message_t payload) {
  if (payload.size() == 0) return {};
  auto message = std::make_shared<zmq::message_t>(std::move(payload));
  return {message, {static_cast<std::byte*>(message->data()), message->size()}};
}

void configureSocket(zmq::socket_t& socket, uint64_t max_payload_bytes, bool ipv6) {
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::maxmsgsize,
             static_cast<int64_t>(std::max<uint64_t>(max_payload_bytes, kFrameHeaderBytes)));
  socket.set(zmq::sockopt::ipv6, ipv6 ? 1 : 0);
}

bool isIpv6(std::string_view host_or_endpoint) {
  if (auto scheme = host_or_endpoint.find("://"); scheme != std::string_view::npos) {
    host_or_endpoint.remove_prefix(scheme + 3);
    return host_or_endpoint.starts_with('[');
  }
  return host_or_endpoint.find(':') != std::string_view::npos;
}

std::string tcpEndpoint(const std::string& host, int port) {
  std::string h = host;
  if (h.find(':') != std::string::npos && !h.starts_with('[')) h = "[" + h + "]";
  return port < 0 ? fmt::format("tcp://{}:*", h) : fmt::format("tcp://{}:{}", h, port);
}

bool isLoopbackHost(std::string_view host) {
  return host.starts_with("127.") || host == "::1" || host == "[::1]" || host == "localhost";
}


bool sendFrame(zmq::socket_t& socket, FrameHeader header, zmq::message_t payload,
               const zmq::message_t* routing_id) {
  header.payload_bytes = payload.size();
  HeaderBytes head = encodeHeader(header);
  // A multipart message is atomic: if the first part is accepted without
  // blocking, ZeroMQ takes the rest too.
  if (routing_id) {
    zmq::message_t id(routing_id->data(), routing_id->size());
    if (!socket.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return false;
  }
  zmq::message_t head_message(head.data(), head.size());
  if (!socket.send(head_message, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return false;
  return socket.send(payload, zmq::send_flags::dontwait).has_value();
}

bool pollItems(std::span<zmq_pollitem_t> items, std::chrono::milliseconds timeout) {
  try {
    zmq::poll(items.data(), items.size(), timeout);
    return true;
  } catch (const zmq::error_t& e) {
    if (e.num() != EINTR) throw;
    for (auto& item : items) item.revents = 0;
    return false;
  }
}

bool waitReadable(zmq::socket_t& socket, std::chrono::milliseconds timeout) {
  zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
  // Callers loop on their deadline, so an interrupted wait just ends early.
  if (!pollItems({&item, 1}, timeout)) return false;
  return (item.revents & ZMQ_POLLIN) != 0;
}

size_t receiveParts(zmq::socket_t& socket, std::vector<zmq::message_t>& parts, size_t keep) {
  parts.clear();
  size_t total = 0;
  while (true) {
    zmq::message_t part;
    zmq::recv_result_t got;
    try {
      got = socket.recv(part, zmq::recv_flags::dontwait);
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR || total != 0) throw;
    }
    // The rest of a multipart message always arrives with its first part.
    if (!got) return total;
    ++total;
    bool more = part.more();
    if (parts.size() < keep) parts.push_back(std::move(part));
    if (!more) return total;
  }
}

Frame decodeFrame(std::span<zmq::message_t> parts, size_t total_parts, uint64_t max_payload_bytes,
                  std::string_view peer, const MessageCatalog& protocol) {
  if (total_parts != 2 || parts.size() != 2) {
    if (!parts.empty()) {
      // Still name the header problem if there is one: it says more than the count.
      validateHeader(parts[0].data(), parts[0].size(), max_payload_bytes, peer, protocol);
    }
    reject(peer, fmt::format("expected 2 message parts (header, payload), got {}", total_parts));
  }
  Frame frame;
  frame.header = validateHeader(parts[0].data(), parts[0].size(), max_payload_bytes, peer, protocol);
  validatePayloadSize(frame.header, parts[1].size(), peer, protocol);
  frame.payload = std::move(parts[1]);
  return frame;
}

}  // namespace tandem::net
