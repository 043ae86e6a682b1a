#pragma once
// A frame's header (layout in net/frame.hpp): its type word, the catalog of
// the types one protocol speaks, and its checks. Apart from the frame
// itself, so that a protocol's messages and the pure policies that answer
// them need no ZeroMQ. The functions are pure and thread-safe.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace tandem::net {

inline constexpr uint32_t kFrameMagic = 0x4D444E54;  // bytes "TNDM" on the wire
// Version 2 turned the reserved word at offset 12 into `clock`.
inline constexpr uint16_t kFrameVersion = 2;
inline constexpr size_t kFrameHeaderBytes = 48;
// Default ceiling for one payload. Senders split anything larger (the
// parameter server chunks tensors well below it).
inline constexpr uint64_t kMaxPayloadBytes = uint64_t{64} << 20;

// The type word. Requests and replies share one numbering; a request is
// answered with kOk, a type-specific reply or kError. The transport knows
// only those two replies: each protocol over frames numbers its own types
// from 16 up (the coordinator's store, 16-31: cluster/store_messages.hpp;
// the parameter server, 32-63: ps/messages.hpp) and names them in its
// MessageCatalog.
enum class MessageType : uint16_t {
  kError = 1,  // reply: the request was rejected; payload is a UTF-8 reason
  kOk = 2,     // reply: done; payload is type-specific (often empty)
};

// The raw type word, to switch on: a protocol's types are not enumerators,
// and GCC warns about case values outside an enum's.
constexpr uint16_t code(MessageType type) { return static_cast<uint16_t>(type); }

struct MessageName {
  MessageType type;
  std::string_view name;
};

// The types one protocol speaks, with the names errors give them. A
// receiver validates each frame against its protocol's catalog, so a frame
// of another protocol, or of none, is refused before its payload is read.
// Immutable and thread-safe; catalogs are constexpr objects.
class MessageCatalog {
 public:
  constexpr explicit MessageCatalog(std::span<const MessageName> names) : names_(names) {}
  // Error and ok, and this protocol's own types.
  bool knows(MessageType type) const;
  // "ps-push", "ok", or "type 77" for a type it does not know.
  std::string nameOf(MessageType type) const;

 private:
  std::span<const MessageName> names_;
};

// The payload is an ArenaRef (net/shared_arena.hpp): the bytes themselves
// lie in the sending worker's shared memory (a push, or a pull's reply), or
// the ref says where a pull's reply is to be written. Only between a worker
// and a server on its host that mapped its arena (ps-hello).
inline constexpr uint32_t kFlagInArena = 1u << 0;
// Unknown bits are rejected so that a future flag cannot be silently
// ignored by an old peer.
inline constexpr uint32_t kKnownFrameFlags = kFlagInArena;

struct FrameHeader {
  MessageType type = MessageType::kOk;
  uint32_t flags = 0;
  uint32_t clock = 0;  // the sender's step (parameter server); 0 elsewhere
  uint64_t request_id = 0;
  // Half-open key range [key_begin, key_end) a request covers; the
  // parameter server routes and checks by it, the store leaves it 0.
  uint64_t key_begin = 0;
  uint64_t key_end = 0;
  uint64_t payload_bytes = 0;
  bool operator==(const FrameHeader&) const = default;
};

using HeaderBytes = std::array<std::byte, kFrameHeaderBytes>;

HeaderBytes encodeHeader(const FrameHeader& header);

// Decodes and checks a received header before anything is allocated for the
// payload. Throws InputError "frame from <peer>: ..." naming what is wrong:
// truncated header, bad magic, unsupported version, a type `protocol` does
// not know, unknown flags, key_begin > key_end, or a payload larger than
// `max_payload_bytes`.
FrameHeader validateHeader(const void* bytes, size_t size, uint64_t max_payload_bytes, std::string_view peer,
                           const MessageCatalog& protocol);

// Checks that the payload that actually arrived has the size the header
// announced. Throws InputError naming the peer and both sizes.
void validatePayloadSize(const FrameHeader& header, size_t received_bytes, std::string_view peer,
                         const MessageCatalog& protocol);

}  // namespace tandem::net
