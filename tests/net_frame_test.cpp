#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <thread>

#include "core/error.hpp"
#include "net/frame.hpp"
#include "net/job_security.hpp"
#include "net/request_client.hpp"
#include "net/wire.hpp"
#include "support/expect_input_error.hpp"
#include "support/test_messages.hpp"
#include "support/test_security.hpp"

// Records the largest single allocation while armed, to show that a header
// announcing a huge payload is rejected before anything of that size is
// allocated. Replacing the global operator new is legal and this binary is
// ours alone. Kept out of line so GCC does not pair the inlined malloc/free
// with new/delete expressions and warn.
namespace {
std::atomic<bool> g_track{false};
std::atomic<size_t> g_largest{0};
}  // namespace

__attribute__((noinline)) void* operator new(size_t size) {
  if (g_track.load(std::memory_order_relaxed)) {
    size_t prev = g_largest.load(std::memory_order_relaxed);
    while (size > prev && !g_largest.compare_exchange_weak(prev, size)) {
    }
  }
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
__attribute__((noinline)) void operator delete(void* p) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace tandem::net {
namespace {

using testing::expectInputError;

FrameHeader sampleHeader() {
  FrameHeader h;
  h.type = testing::kAsk;
  h.flags = 0;
  h.request_id = 0x0102030405060708ULL;
  h.key_begin = 7;
  h.key_end = 0xFFFFFFFFFFFFFFFFULL;
  h.payload_bytes = 12345;
  return h;
}

template <class T>
void patch(HeaderBytes& bytes, size_t offset, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) bytes[offset + i] = static_cast<std::byte>((value >> (8 * i)) & 0xFF);
}

TEST(FrameHeader, RoundTripsEveryField) {
  FrameHeader h = sampleHeader();
  HeaderBytes bytes = encodeHeader(h);
  EXPECT_EQ(bytes.size(), kFrameHeaderBytes);
  EXPECT_EQ(std::memcmp(bytes.data(), "TNDM", 4), 0);  // little-endian magic reads as text
  EXPECT_EQ(validateHeader(bytes.data(), bytes.size(), kMaxPayloadBytes, "test", testing::kTestMessages), h);

  FrameHeader zero;
  zero.type = MessageType::kError;
  auto zb = encodeHeader(zero);
  EXPECT_EQ(validateHeader(zb.data(), zb.size(), kMaxPayloadBytes, "test", testing::kTestMessages), zero);
}

TEST(FrameHeader, IsLittleEndianOnTheWire) {
  auto bytes = encodeHeader(sampleHeader());
  EXPECT_EQ(bytes[16], std::byte{0x08});  // request_id low byte first
  EXPECT_EQ(bytes[23], std::byte{0x01});
  EXPECT_EQ(bytes[4], std::byte{kFrameVersion});
}

TEST(FrameHeader, RejectsTruncatedHeader) {
  auto bytes = encodeHeader(sampleHeader());
  expectInputError([&] { validateHeader(bytes.data(), 12, kMaxPayloadBytes, "worker 3", testing::kTestMessages); },
                   {"frame from worker 3", "truncated header: 12 of 48 bytes"});
  expectInputError([&] { validateHeader(bytes.data(), 0, kMaxPayloadBytes, "p", testing::kTestMessages); }, {"truncated header: 0 of 48"});
}

TEST(FrameHeader, RejectsOverlongHeader) {
  std::vector<std::byte> bytes(60);
  auto h = encodeHeader(sampleHeader());
  std::copy(h.begin(), h.end(), bytes.begin());
  expectInputError([&] { validateHeader(bytes.data(), bytes.size(), kMaxPayloadBytes, "p", testing::kTestMessages); },
                   {"header of 60 bytes (expected 48)"});
}

TEST(FrameHeader, RejectsBadMagic) {
  auto bytes = encodeHeader(sampleHeader());
  patch<uint32_t>(bytes, 0, 0x50545448);  // "HTTP"
  expectInputError([&] { validateHeader(bytes.data(), bytes.size(), kMaxPayloadBytes, "10.0.0.7", testing::kTestMessages); },
                   {"frame from 10.0.0.7", "bad magic 0x50545448 (expected 0x4d444e54)"});
  // A short message that is not ours is named by its magic, not its length.
  expectInputError([&] { validateHeader("GET / HTTP/1.1", 14, kMaxPayloadBytes, "p", testing::kTestMessages); }, {"bad magic"});
}

TEST(FrameHeader, RejectsOtherVersions) {
  auto bytes = encodeHeader(sampleHeader());
  patch<uint16_t>(bytes, 4, 3);
  expectInputError([&] { validateHeader(bytes.data(), bytes.size(), kMaxPayloadBytes, "p", testing::kTestMessages); },
                   {"unsupported version 3 (this build speaks 2)"});
}

TEST(MessageCatalog, KnowsTheRepliesAndItsOwnTypesByName) {
  const MessageCatalog& c = testing::kTestMessages;
  EXPECT_TRUE(c.knows(MessageType::kOk));
  EXPECT_TRUE(c.knows(MessageType::kError));
  EXPECT_TRUE(c.knows(testing::kAnswer));
  EXPECT_FALSE(c.knows(MessageType{18}));
  EXPECT_EQ(c.nameOf(testing::kAsk), "ask");
  EXPECT_EQ(c.nameOf(MessageType::kError), "error");
  EXPECT_EQ(c.nameOf(MessageType{77}), "type 77");
}

TEST(FrameHeader, RejectsUnknownTypeAndFlags) {
  auto bytes = encodeHeader(sampleHeader());
  patch<uint16_t>(bytes, 6, 999);
  expectInputError([&] { validateHeader(bytes.data(), bytes.size(), kMaxPayloadBytes, "p", testing::kTestMessages); },
                   {"unknown message type 999"});
  patch<uint16_t>(bytes, 6, 0);
  expectInputError([&] { validateHeader(bytes.data(), bytes.size(), kMaxPayloadBytes, "p", testing::kTestMessages); },
                   {"unknown message type 0"});
  // A type another protocol speaks is unknown to this one.
  patch<uint16_t>(bytes, 6, 35);
  expectInputError([&] { validateHeader(bytes.data(), bytes.size(), kMaxPayloadBytes, "p", testing::kTestMessages); },
                   {"unknown message type 35"});

  bytes = encodeHeader(sampleHeader());
  patch<uint32_t>(bytes, 8, 0x10);
  expectInputError([&] { validateHeader(bytes.data(), bytes.size(), kMaxPayloadBytes, "p", testing::kTestMessages); },
                   {"unknown flags 0x10"});
}

TEST(FrameHeader, ClockTravelsAtOffset12) {
  FrameHeader h = sampleHeader();
  h.clock = 0xA1B2C3D4u;
  auto bytes = encodeHeader(h);
  EXPECT_EQ(std::to_integer<uint8_t>(bytes[12]), 0xD4);
  EXPECT_EQ(std::to_integer<uint8_t>(bytes[15]), 0xA1);
  EXPECT_EQ(validateHeader(bytes.data(), bytes.size(), kMaxPayloadBytes, "p", testing::kTestMessages), h);
}

TEST(FrameHeader, RejectsReversedKeyRange) {
  FrameHeader h = sampleHeader();
  h.key_begin = 10;
  h.key_end = 9;
  auto bytes = encodeHeader(h);
  expectInputError([&] { validateHeader(bytes.data(), bytes.size(), kMaxPayloadBytes, "p", testing::kTestMessages); },
                   {"key range [10, 9)"});
  h.key_end = 10;  // empty range is fine
  bytes = encodeHeader(h);
  EXPECT_NO_THROW(validateHeader(bytes.data(), bytes.size(), kMaxPayloadBytes, "p", testing::kTestMessages));
}

TEST(FrameHeader, RejectsOversizedPayloadBeforeAllocating) {
  FrameHeader h = sampleHeader();
  h.payload_bytes = uint64_t{1} << 40;
  auto bytes = encodeHeader(h);
  g_largest = 0;
  g_track = true;
  try {
    validateHeader(bytes.data(), bytes.size(), kMaxPayloadBytes, "ps 1", testing::kTestMessages);
    ADD_FAILURE() << "no throw";
  } catch (const InputError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("frame from ps 1: payload of 1099511627776 bytes exceeds the 64 MiB limit"),
              std::string::npos)
        << what;
  }
  g_track = false;
  // Only the error message was allocated.
  EXPECT_LT(g_largest.load(), size_t{4096});
  // The tracker does see large allocations.
  g_track = true;
  auto control = std::make_unique<std::vector<char>>(size_t{1} << 20);
  g_track = false;
  EXPECT_GE(g_largest.load(), size_t{1} << 20);

  h.payload_bytes = kMaxPayloadBytes;  // exactly at the limit passes
  bytes = encodeHeader(h);
  EXPECT_NO_THROW(validateHeader(bytes.data(), bytes.size(), kMaxPayloadBytes, "p", testing::kTestMessages));
  expectInputError([&] { validateHeader(bytes.data(), bytes.size(), 1000, "p", testing::kTestMessages); }, {"exceeds the 1000 bytes limit"});
}

TEST(FrameHeader, RejectsPayloadSizeMismatch) {
  FrameHeader h = sampleHeader();
  h.payload_bytes = 10;
  expectInputError([&] { validatePayloadSize(h, 5, "worker 1", testing::kTestMessages); },
                   {"frame from worker 1", "payload of 10 bytes but 5 arrived"});
  EXPECT_NO_THROW(validatePayloadSize(h, 10, "p", testing::kTestMessages));
}

TEST(FrameHeader, RandomBytesAreRejectedCleanly) {
  std::mt19937_64 rng(42);
  std::vector<std::byte> buf(128);
  int accepted = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    size_t size = rng() % buf.size();
    for (auto& b : buf) b = static_cast<std::byte>(rng());
    // Some trials get a whole header with the right magic and version (and
    // some a known type too) so the deeper checks get exercised as well.
    if (trial % 2 == 0) {
      size = kFrameHeaderBytes;
      std::memcpy(buf.data(), "TNDM\x02\x00", 6);
      if (trial % 4 == 0) std::memcpy(buf.data() + 6, "\x10\x00", 2);
    }
    try {
      validateHeader(buf.data(), size, kMaxPayloadBytes, "fuzz", testing::kTestMessages);
      ++accepted;
    } catch (const InputError&) {
    }
  }
  // Random type, flags and size fields essentially never line up.
  EXPECT_EQ(accepted, 0);
}

TEST(FrameHeader, EveryBitFlipIsRejectedOrDecodedConsistently) {
  FrameHeader h = sampleHeader();
  h.payload_bytes = 100;
  auto good = encodeHeader(h);
  for (size_t byte = 0; byte < kFrameHeaderBytes; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      auto bytes = good;
      bytes[byte] ^= static_cast<std::byte>(1 << bit);
      try {
        FrameHeader got = validateHeader(bytes.data(), bytes.size(), kMaxPayloadBytes, "p", testing::kTestMessages);
        // Accepted flips may only touch free-form fields (clock, ids, keys,
        // size), the type, or a known flag (kFlagInArena: byte 8, bit 0).
        const bool known_flag = byte == 8 && bit == 0;
        EXPECT_TRUE((byte >= 12 && byte < 48) || byte == 6 || byte == 7 || known_flag) << "byte " << byte;
        EXPECT_EQ(got.flags, known_flag ? kFlagInArena : 0u) << "byte " << byte << " bit " << bit;
        EXPECT_FALSE(got == h);
      } catch (const InputError&) {
      }
    }
  }
}

TEST(Frame, DecodesTwoPartMessages) {
  FrameHeader h = sampleHeader();
  h.payload_bytes = 3;
  h.key_end = 8;
  auto head = encodeHeader(h);
  std::vector<zmq::message_t> parts;
  parts.emplace_back(head.data(), head.size());
  parts.emplace_back("abc", 3);
  Frame f = decodeFrame(parts, 2, kMaxPayloadBytes, "p", testing::kTestMessages);
  EXPECT_EQ(f.header, h);
  EXPECT_EQ(f.text(), "abc");

  std::vector<zmq::message_t> one;
  one.emplace_back(head.data(), head.size());
  expectInputError([&] { decodeFrame(one, 1, kMaxPayloadBytes, "worker 2", testing::kTestMessages); },
                   {"frame from worker 2", "expected 2 message parts (header, payload), got 1"});

  std::vector<zmq::message_t> junk;
  junk.emplace_back("hello", 5);
  expectInputError([&] { decodeFrame(junk, 1, kMaxPayloadBytes, "p", testing::kTestMessages); }, {"bad magic"});

  std::vector<zmq::message_t> short_payload;
  short_payload.emplace_back(head.data(), head.size());
  short_payload.emplace_back("ab", 2);
  expectInputError([&] { decodeFrame(short_payload, 2, kMaxPayloadBytes, "p", testing::kTestMessages); }, {"3 bytes but 2 arrived"});
}

TEST(Frame, SharedPayloadIsZeroCopyAndReleasesItsOwner) {
  zmq::context_t ctx(1);
  zmq::socket_t a(ctx, zmq::socket_type::pair);
  zmq::socket_t b(ctx, zmq::socket_type::pair);
  configureSocket(a);
  configureSocket(b);
  a.bind("inproc://zero-copy");
  b.connect("inproc://zero-copy");

  auto value = std::make_shared<const std::vector<char>>(1 << 16, 'x');
  std::weak_ptr<const std::vector<char>> watch = value;
  const void* original = value->data();
  FrameHeader h;
  h.type = testing::kAnswer;
  h.request_id = 9;
  ASSERT_TRUE(sendFrame(a, h, sharedPayload(std::move(value))));
  EXPECT_FALSE(watch.expired());  // ZeroMQ still holds it

  ASSERT_TRUE(waitReadable(b, std::chrono::milliseconds(2000)));
  std::vector<zmq::message_t> parts;
  size_t total = receiveParts(b, parts, 2);
  ASSERT_EQ(total, 2u);
  {
    Frame f = decodeFrame(parts, total, kMaxPayloadBytes, "a", testing::kTestMessages);
    EXPECT_EQ(f.header.request_id, 9u);
    EXPECT_EQ(f.header.payload_bytes, size_t{1} << 16);
    // inproc hands over the very buffer: no copy anywhere on the way.
    EXPECT_EQ(f.payload.data(), original);
    EXPECT_FALSE(watch.expired());
  }
  EXPECT_TRUE(watch.expired());
}

TEST(Frame, ReceivePartsBoundsWhatItKeeps) {
  zmq::context_t ctx(1);
  zmq::socket_t a(ctx, zmq::socket_type::pair);
  zmq::socket_t b(ctx, zmq::socket_type::pair);
  a.bind("inproc://parts");
  b.connect("inproc://parts");
  for (int i = 0; i < 9; ++i) {
    zmq::message_t m("p", 1);
    a.send(m, i < 8 ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  zmq::message_t after("q", 1);
  a.send(after, zmq::send_flags::none);
  ASSERT_TRUE(waitReadable(b, std::chrono::milliseconds(2000)));
  std::vector<zmq::message_t> parts;
  EXPECT_EQ(receiveParts(b, parts, 2), 9u);
  EXPECT_EQ(parts.size(), 2u);
  // The next message starts cleanly after the discarded parts.
  EXPECT_EQ(receiveParts(b, parts, 2), 1u);
  EXPECT_EQ(parts[0].to_string_view(), "q");
  EXPECT_EQ(receiveParts(b, parts, 2), 0u);
}

TEST(Frame, SalvagesRequestIdOnlyFromOurHeaders) {
  FrameHeader h = sampleHeader();
  auto bytes = encodeHeader(h);
  patch<uint16_t>(bytes, 4, 7);  // a future version still names its request
  EXPECT_EQ(salvageRequestId(bytes.data(), bytes.size()), h.request_id);
  EXPECT_EQ(salvageRequestId(bytes.data(), 20), 0u);
  patch<uint32_t>(bytes, 0, 0);
  EXPECT_EQ(salvageRequestId(bytes.data(), bytes.size()), 0u);
}

TEST(Frame, FormatsSizesAndEndpoints) {
  EXPECT_EQ(formatBytes(64 << 20), "64 MiB");
  EXPECT_EQ(formatBytes(3 << 10), "3 KiB");
  EXPECT_EQ(formatBytes(17), "17 bytes");
  EXPECT_EQ(tcpEndpoint("127.0.0.1", 5555), "tcp://127.0.0.1:5555");
  EXPECT_EQ(tcpEndpoint("::1", 80), "tcp://[::1]:80");
  EXPECT_EQ(tcpEndpoint("[::1]", 80), "tcp://[::1]:80");
  EXPECT_EQ(tcpEndpoint("0.0.0.0", -1), "tcp://0.0.0.0:*");
  EXPECT_TRUE(isIpv6("::1"));
  EXPECT_TRUE(isIpv6("[::1]"));
  EXPECT_TRUE(isIpv6("tcp://[::1]:5"));
  EXPECT_FALSE(isIpv6("tcp://127.0.0.1:5"));
  EXPECT_FALSE(isIpv6("localhost"));
  EXPECT_EQ(formatDuration(std::chrono::milliseconds(300)), "300ms");
  EXPECT_EQ(formatDuration(std::chrono::milliseconds(30000)), "30s");
  EXPECT_EQ(formatDuration(std::chrono::milliseconds(1500)), "1.5s");
}

TEST(Wire, RoundTripsFields) {
  PayloadWriter w;
  w.putU32(7);
  w.putU64(1ULL << 40);
  w.putString("key");
  w.putStrings({"a", "", "ccc"});
  w.putRaw("tail", 4);
  auto bytes = w.take();
  PayloadReader r(std::as_bytes(std::span(bytes)), "p", "test payload");
  EXPECT_EQ(r.u32("a"), 7u);
  EXPECT_EQ(r.u64("b"), 1ULL << 40);
  EXPECT_EQ(r.string("c"), "key");
  EXPECT_EQ(r.strings("d"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(r.rest().size(), 4u);
  EXPECT_NO_THROW(r.expectEnd());
}

TEST(Wire, LyingLengthsAreInputErrors) {
  PayloadWriter w;
  w.putU32(1000);  // claims a 1000-byte string
  w.putRaw("abc", 3);
  auto bytes = w.take();
  PayloadReader r(std::as_bytes(std::span(bytes)), "worker 4", "store-set payload");
  expectInputError([&] { r.string("key"); },
                   {"frame from worker 4", "store-set payload truncated at key: needs 1000 bytes, 3 left"});

  PayloadWriter many;
  many.putU32(0xFFFFFFFF);  // a count that would reserve 4 billion strings
  auto mb = many.take();
  g_largest = 0;
  g_track = true;
  PayloadReader r2(std::as_bytes(std::span(mb)), "p", "list");
  expectInputError([&] { r2.strings("keys"); }, {"claims 4294967295 entries"});
  g_track = false;
  EXPECT_LT(g_largest.load(), size_t{4096});

  PayloadWriter extra;
  extra.putU32(1);
  auto eb = extra.take();
  PayloadReader r3(std::as_bytes(std::span(eb)), "p", "x");
  expectInputError([&] { r3.expectEnd(); }, {"4 unexpected trailing bytes"});
}

// A ROUTER that answers each request twice: first with a wrong request id
// (as a late reply to an abandoned request would arrive), then correctly.
TEST(RequestClient, DiscardsRepliesToOtherRequests) {
  zmq::context_t ctx(1);
  zmq::socket_t server(ctx, zmq::socket_type::router);
  configureSocket(server);
  const auto zap = secureServer(ctx, server, "the test server", tandem::testing::testSecurity());
  server.bind("tcp://127.0.0.1:*");
  std::string endpoint = server.get(zmq::sockopt::last_endpoint);
  std::atomic<bool> stop{false};
  std::thread t([&] {
    std::vector<zmq::message_t> parts;
    while (!stop) {
      if (!waitReadable(server, std::chrono::milliseconds(10))) continue;
      size_t total = receiveParts(server, parts, 3);
      ASSERT_EQ(total, 3u);
      Frame req = decodeFrame(std::span(parts).subspan(1), 2, kMaxPayloadBytes, "client", testing::kTestMessages);
      FrameHeader stale{.type = testing::kAnswer, .request_id = req.header.request_id + 100};
      sendFrame(server, stale, copyPayload("stale"), &parts[0]);
      FrameHeader good{.type = testing::kAnswer, .request_id = req.header.request_id};
      sendFrame(server, good, copyPayload(std::string(req.text()) + "!"), &parts[0]);
    }
  });
  {
    zmq::context_t cctx(1);
    RequestClient client(cctx, endpoint, "echo", testing::kTestMessages, tandem::testing::testSecurity());
    for (int i = 0; i < 3; ++i) {
      auto reply = client.request({testing::kAsk}, copyPayload("k" + std::to_string(i)),
                                  Deadline::after(std::chrono::milliseconds(2000)));
      ASSERT_TRUE(reply);
      EXPECT_EQ(reply->text(), "k" + std::to_string(i) + "!");
    }
  }
  stop = true;
  t.join();
}

TEST(RequestClient, GivesUpAtTheDeadlineWhenNobodyListens) {
  zmq::context_t ctx(1);
  RequestClient client(ctx, "tcp://127.0.0.1:9", "nobody", testing::kTestMessages, tandem::testing::testSecurity());
  auto start = std::chrono::steady_clock::now();
  auto reply = client.request({testing::kAsk}, copyPayload("k"), Deadline::after(std::chrono::milliseconds(200)));
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(reply);
  EXPECT_GE(took, std::chrono::milliseconds(190));
  EXPECT_LT(took, std::chrono::milliseconds(1000));
}

}  // namespace
}  // namespace tandem::net

namespace tandem::net {
namespace {

TEST(SameHostEndpoint, OnlyLoopbackServersAreTakenForThisHosts) {
  for (const char* host : {"127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"}) EXPECT_TRUE(isLoopbackHost(host)) << host;
  for (const char* host : {"10.0.0.1", "192.168.1.5", "example.com", "*", ""}) EXPECT_FALSE(isLoopbackHost(host)) << host;
  const std::string endpoint = sameHostEndpoint(5000, JobSecurity::insecure());
  EXPECT_EQ(endpoint, fmt::format("ipc://{}/tandem-{}/ps-5000", std::filesystem::temp_directory_path().string(),
                                  ::getuid()));
  // Each job's servers have their own names: another secret finds none.
  const auto one = JobSecurity::withKeys(generateJobKeys()), two = JobSecurity::withKeys(generateJobKeys());
  EXPECT_EQ(sameHostEndpoint(5000, one), sameHostEndpoint(5000, one));
  EXPECT_NE(sameHostEndpoint(5000, one), sameHostEndpoint(5000, two));
  EXPECT_TRUE(sameHostEndpoint(5000, one).starts_with(endpoint + "-")) << sameHostEndpoint(5000, one);
  struct stat st{};
  ASSERT_EQ(::stat(endpoint.substr(6, endpoint.rfind('/') - 6).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u) << "other users could reach the same-host sockets";
}

}  // namespace
}  // namespace tandem::net
