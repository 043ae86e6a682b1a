#pragma once
// One message on the wire: a fixed 48-byte little-endian header and an
// opaque payload, carried as a two-part ZeroMQ message [header][payload] so
// the payload can be handed to ZeroMQ without a copy. Everything a peer sends
// is untrusted: the header is checked (magic, version, type, flags, key range,
// sizes) before the payload is looked at or anything is allocated for it.
//
// Header layout (offsets in bytes, all little-endian):
//    0 magic u32 ('TNDM')   4 version u16        6 type u16
//    8 flags u32           12 clock u32         16 request_id u64
//   24 key_begin u64       32 key_end u64       40 payload_bytes u64
// magic and request_id keep their offsets in every version, so a peer can
// always answer "unsupported version" to the request that carried it.
//
// Thread safety: the encode/validate functions are pure and thread-safe.
// Functions that take a zmq::socket_t must only be called from the thread
// that uses that socket (ZeroMQ sockets are not thread-safe).
#include <zmq.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/bytes.hpp"
#include "net/frame_header.hpp"

namespace tandem::net {

// A received, validated frame. The payload stays in ZeroMQ's buffer.
struct Frame {
  FrameHeader header;
  zmq::message_t payload;

  std::span<const std::byte> bytes() const {
    return {static_cast<const std::byte*>(payload.data()), payload.size()};
  }
  std::string_view text() const { return {static_cast<const char*>(payload.data()), payload.size()}; }
};

// Payload builders.
zmq::message_t copyPayload(const void* data, size_t size);
inline zmq::message_t copyPayload(std::string_view text) { return copyPayload(text.data(), text.size()); }
inline zmq::message_t copyPayload(const std::vector<char>& bytes) { return copyPayload(bytes.data(), bytes.size()); }
// Zero-copy: ZeroMQ sends straight from `data`, and keeps `owner` alive
// until it no longer needs the bytes. `owner` is released on a ZeroMQ I/O
// thread, so its destructor must be safe to run there. The bytes must not
// change while a send may still be in flight.
zmq::message_t sharedPayload(std::shared_ptr<const void> owner, const void* data, size_t size);
// Zero-copy from a shared, immutable byte vector.
zmq::message_t sharedPayload(std::shared_ptr<const std::vector<char>> bytes);
// Zero-copy from bytes a pure layer handed out (its owner rides along).
inline zmq::message_t sharedPayload(SharedBytes bytes) {
  return sharedPayload(std::move(bytes.owner), bytes.data(), bytes.size());
}
// A received payload as bytes a pure layer may keep (and write): the
// message moves behind the owner, its buffer stays where it is.
OwnedBytes adoptPayload(zmq::message_t payload);

// Settings every Tandem socket gets: no linger on close (a dead peer must
// not stall shutdown), and libzmq itself drops a peer that sends a part
// larger than a header or `max_payload_bytes`, before buffering it.
// IPv6 is turned on only for IPv6 endpoints: with it on, a name like
// "localhost" may resolve to ::1 while the server listens on 127.0.0.1.
// Socket's thread only.
void configureSocket(zmq::socket_t& socket, uint64_t max_payload_bytes = kMaxPayloadBytes, bool ipv6 = false);

// "tcp://host:port", with IPv6 hosts bracketed; port < 0 means "*"
// (let the OS pick, for bind).
std::string tcpEndpoint(const std::string& host, int port);
// A server listening on a loopback `host` (127.x.y.z, ::1, localhost) is on
// its clients' host, and also listens on a Unix socket there
// (net/job_security.hpp, sameHostEndpoint).
bool isLoopbackHost(std::string_view host);
// Whether `host_or_endpoint` names an IPv6 address ("::1", "[::1]",
// "tcp://[::1]:5").
bool isIpv6(std::string_view host_or_endpoint);

// Sends [routing_id][header][payload] (routing_id only for ROUTER sockets,
// pass nullptr otherwise). Fills in header.payload_bytes from the payload.
// Returns false if the socket could not take the message without blocking
// (DEALER with a full queue; a ROUTER drops instead). Socket's thread only.
bool sendFrame(zmq::socket_t& socket, FrameHeader header, zmq::message_t payload,
               const zmq::message_t* routing_id = nullptr);

// zmq_poll over `items` (sockets and raw fds) for up to `timeout` (-1:
// forever). A signal interrupting the wait clears every revents and returns
// false, so loops simply go round again. Caller's sockets' thread only.
bool pollItems(std::span<zmq_pollitem_t> items, std::chrono::milliseconds timeout);

// Waits until `socket` has a message to read or `timeout` passes; a signal
// interrupting the wait counts as "nothing yet". Socket's thread only.
bool waitReadable(zmq::socket_t& socket, std::chrono::milliseconds timeout);

// Receives the parts of one multipart message without blocking. Keeps at
// most `keep` parts in `parts` and discards the rest (so a peer cannot make
// us hold an unbounded number of parts); returns the total number of parts,
// 0 when no message was waiting. Socket's thread only.
size_t receiveParts(zmq::socket_t& socket, std::vector<zmq::message_t>& parts, size_t keep);

// Validates [header][payload] parts (exactly two) into a Frame of
// `protocol`. Throws InputError naming the peer when the part count or the
// header is wrong.
Frame decodeFrame(std::span<zmq::message_t> parts, size_t total_parts, uint64_t max_payload_bytes,
                  std::string_view peer, const MessageCatalog& protocol);

// The request id of a header that failed validation, if it can be trusted
// enough to address an error reply (magic matches and the header is whole);
// 0 otherwise.
uint64_t salvageRequestId(const void* bytes, size_t size);

// "64 MiB", "3 KiB", "17 bytes": how errors print sizes.
std::string formatBytes(uint64_t bytes);

}  // namespace tandem::net
