// Same-host shared memory between a worker and its servers: the arena
// itself (what a peer may and may not name), and pushes and pulls through
// it against real servers in this process, beside a worker that sends bytes.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "core/error.hpp"
#include "support/expect_input_error.hpp"
#include "net/job_security.hpp"
#include "net/shared_arena.hpp"
#include "ps/messages.hpp"
#include "ps/worker.hpp"
#include "support/ps_server_harness.hpp"
#include "support/test_security.hpp"

namespace tandem::ps::testing {
namespace {

using net::ArenaRef;
using net::SharedArena;

using tandem::testing::inputErrorOf;

TEST(SharedArena, AnOpenedArenaIsTheSameMemoryBothWays) {
  const auto mine = SharedArena::create(1000);
  ASSERT_EQ(mine->size(), 1000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(mine->data()) % 4096, 0u) << "the usable region is page-aligned";
  const auto theirs = SharedArena::open(mine->handle(), "worker 3");
  EXPECT_NE(mine->data(), theirs->data()) << "a second mapping";
  std::memcpy(mine->data() + 10, "push", 4);
  EXPECT_EQ(std::memcmp(theirs->data() + 10, "push", 4), 0);
  std::memcpy(theirs->data() + 990, "pull", 4);
  EXPECT_EQ(std::memcmp(mine->data() + 990, "pull", 4), 0);
}

TEST(SharedArena, AnotherProcessOfThisUserMapsItThroughProc) {
  const auto mine = SharedArena::create(64);
  const net::ArenaHandle handle = mine->handle();
  const pid_t child = ::fork();
  if (child == 0) {
    try {
      const auto theirs = SharedArena::open(handle, "the parent");
      std::memcpy(theirs->data(), "child", 5);
      ::_exit(0);
    } catch (...) {
      ::_exit(1);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(std::memcmp(mine->data(), "child", 5), 0);
}

TEST(SharedArena, AHandleThatNamesSomethingElseIsRefusedNamingThePeer) {
  const auto mine = SharedArena::create(256);
  net::ArenaHandle wrong_token = mine->handle();
  wrong_token.token[3] ^= 1;
  EXPECT_NE(inputErrorOf([&] { SharedArena::open(wrong_token, "worker 2"); }).find("worker 2's shared memory"),
            std::string::npos);
  EXPECT_NE(inputErrorOf([&] { SharedArena::open(wrong_token, "worker 2"); }).find("another token"),
            std::string::npos);
  net::ArenaHandle wrong_size = mine->handle();
  wrong_size.bytes = 512;
  EXPECT_NE(inputErrorOf([&] { SharedArena::open(wrong_size, "w"); }).find("not the 512 bytes it announced"),
            std::string::npos);
  net::ArenaHandle huge = mine->handle();
  huge.bytes = UINT64_MAX;
  EXPECT_NE(inputErrorOf([&] { SharedArena::open(huge, "w"); }).find("not the"), std::string::npos);
  net::ArenaHandle no_fd = mine->handle();
  no_fd.fd = 1'000'000;
  EXPECT_NE(inputErrorOf([&] { SharedArena::open(no_fd, "w"); }).find("cannot be opened here"), std::string::npos);
  net::ArenaHandle not_memory = mine->handle();
  not_memory.fd = 0;  // stdin: not a regular file of that size
  EXPECT_NE(inputErrorOf([&] { SharedArena::open(not_memory, "w"); }), "(no InputError)");
}

TEST(SharedArena, ReferencesOutsideTheArenaOrLargerThanAllowedAreRefused) {
  const auto arena = SharedArena::create(100);
  EXPECT_EQ(arena->slice({40, 60}, 60, "w").size(), 60u);
  EXPECT_EQ(arena->slice({40, 60}, 60, "w").data(), arena->data() + 40);
  EXPECT_NE(inputErrorOf([&] { arena->slice({41, 60}, 100, "worker 1"); }).find("worker 1 named 60 bytes at offset 41"),
            std::string::npos);
  EXPECT_NE(inputErrorOf([&] { arena->slice({0, 60}, 59, "w"); }).find("at most 59"), std::string::npos);
  EXPECT_NE(inputErrorOf([&] { arena->slice({UINT64_MAX - 1, 4}, 100, "w"); }), "(no InputError)");
  EXPECT_TRUE(arena->contains(arena->data() + 96, 4));
  EXPECT_FALSE(arena->contains(arena->data() + 97, 4));
  EXPECT_FALSE(arena->contains(arena->data() - 1, 1));
  const std::vector<char> bytes = net::encode(ArenaRef{7, 9});
  EXPECT_EQ(net::decodeArenaRef(std::as_bytes(std::span(bytes)), "w"), (ArenaRef{7, 9}));
  EXPECT_NE(inputErrorOf([&] { net::decodeArenaRef(std::as_bytes(std::span(bytes)).first(15), "w"); }),
            "(no InputError)");
}

// Two same-host servers, a 10-float model in 4-float chunks, SGD at 0.5.
struct SameHostJob {
  KeyLayout layout = buildKeyLayout({{"w", 6}, {"b", 4}}, 2, 16);
  std::vector<std::unique_ptr<RunningServer>> servers;
  std::vector<ServerAddress> addresses;
  Mode mode;
  WireDtype wire;

  SameHostJob(Mode mode, WireDtype wire) : mode(mode), wire(wire) {
    for (int i = 0; i < 2; ++i) {
      servers.push_back(std::make_unique<RunningServer>(ServerOptions{.bind_host = "127.0.0.1", .index = i}));
      addresses.push_back({net::sameHostEndpoint(servers.back()->port(), tandem::testing::testSecurity()), "ps " + std::to_string(i)});
    }
  }
  std::vector<ServerConfig> configs(int workers) const { return configsFor(layout, mode, wire, workers, 2); }
  Worker worker(uint32_t index, bool shared) const {
    return Worker({.servers = addresses, .layout = layout, .mode = mode, .index = index, .wire = wire,
                   .shared_memory = shared},
                  tandem::testing::testSecurity());
  }
};

// Worker 0 pushes from its arena and pulls into it; worker 1 sends bytes.
// Both see the same mean update, and the servers count what crossed where.
TEST(PsSharedMemory, ASyncStepThroughSharedMemoryMatchesOneThroughTheSocket) {
  SameHostJob job(Mode::PsSync, WireDtype::kFloat32);
  const Deadline deadline = Deadline::afterSeconds(5);
  Worker chief = job.worker(0, true);
  Worker other = job.worker(1, false);
  ASSERT_NE(chief.sharedArena(), nullptr);
  EXPECT_EQ(other.sharedArena(), nullptr);
  chief.initServers(job.configs(2), [&](size_t c, int64_t&) { return initial(job.layout, c); }, deadline);
  std::vector<std::vector<float>> pulled0(3), pulled1(3);
  auto run = [&](Worker& w, float share, std::vector<std::vector<float>>& pulled) {
    w.hello(deadline);
    std::vector<float> own(static_cast<size_t>(job.layout.total_floats), share);
    float* grads = w.sharedArena() ? reinterpret_cast<float*>(w.sharedArena()->data()) : own.data();
    std::fill(grads, grads + job.layout.total_floats, share);
    for (size_t c = 0; c < job.layout.chunks.size(); ++c) w.push(c, grads + job.layout.chunks[c].begin, 0);
    w.reportStep(1, {1.0, 0.1, false}, deadline);
    w.awaitPushes(deadline, 0);
    w.receivePulls(deadline, 0, [&](size_t c, const PulledValues& v) {
      ASSERT_EQ(v.count, static_cast<size_t>(job.layout.chunks[c].length));
      if (w.sharedArena()) {
        EXPECT_TRUE(w.sharedArena()->contains(v.data, v.count * sizeof(float))) << "chunk " << c;
      }
      const auto* floats = static_cast<const float*>(v.data);
      pulled[c].assign(floats, floats + v.count);
    });
    w.sayDone(deadline);
  };
  std::thread second([&] { run(other, 1.5f, pulled1); });
  run(chief, 0.5f, pulled0);
  second.join();
  EXPECT_EQ(chief.serversSharingMemory(), 2);
  EXPECT_EQ(other.serversSharingMemory(), 0);
  for (size_t c = 0; c < 3; ++c) {
    std::vector<float> expected = initial(job.layout, c);
    for (auto& v : expected) v -= 0.5f * (0.5f + 1.5f);
    EXPECT_EQ(pulled0[c], expected) << "chunk " << c;
    EXPECT_EQ(pulled1[c], expected) << "chunk " << c;
  }
  uint64_t shared_in = 0, shared_out = 0, bytes_in = 0;
  for (auto& s : job.servers) {
    const auto summary = s->summary();
    shared_in += summary["shared_memory_bytes_in"].get<uint64_t>();
    shared_out += summary["shared_memory_bytes_out"].get<uint64_t>();
    bytes_in += summary["bytes_in"].get<uint64_t>();
  }
  // Worker 0's 10 floats each way went through its arena; worker 1's pushes did not.
  EXPECT_EQ(shared_in, 40u);
  EXPECT_EQ(shared_out, 40u);
  EXPECT_EQ(bytes_in, 40u + 40u) << "both workers' pushes, each counted once";
}

// Async, 16-bit wire: the pushes are bytes (the worker rounds them outside
// the arena), the pulls land in the arena in the wire's format.
TEST(PsSharedMemory, SixteenBitPullsLandInTheArenaInTheWireFormat) {
  SameHostJob job(Mode::PsAsync, WireDtype::kBfloat16);
  const Deadline deadline = Deadline::afterSeconds(5);
  Worker w = job.worker(0, true);
  w.initServers(job.configs(1), [&](size_t c, int64_t&) { return initial(job.layout, c); }, deadline);
  w.hello(deadline);
  ASSERT_EQ(w.serversSharingMemory(), 2);
  std::vector<std::vector<float>> grads;
  for (const auto& chunk : job.layout.chunks) grads.emplace_back(static_cast<size_t>(chunk.length), 2.0f);
  for (size_t c = 0; c < grads.size(); ++c) w.push(c, grads[c].data(), 0);
  w.awaitPushes(deadline, 0);
  w.receivePulls(deadline, 0, [&](size_t c, const PulledValues& v) {
    EXPECT_TRUE(w.sharedArena()->contains(v.data, v.count * 2));
    std::vector<float> got(static_cast<size_t>(job.layout.chunks[c].length));
    ASSERT_EQ(v.count, got.size());
    ASSERT_EQ(v.wire, WireDtype::kBfloat16);
    decodeWire(WireDtype::kBfloat16, v.data, got.data(), got.size());
    std::vector<float> expected = initial(job.layout, c);
    for (auto& v : expected) v -= 0.5f * 2.0f;  // small integers: exact in bfloat16
    EXPECT_EQ(got, expected) << "chunk " << c;
  });
  w.sayDone(deadline);
}

// A worker over TCP (another host, as far as the server knows) never gets
// its arena mapped, and a reference from a worker without one is refused.
TEST(PsSharedMemory, OnlySameHostWorkersThatOfferedAnArenaMayNameOne) {
  RunningServer server(ServerOptions{.bind_host = "127.0.0.1", .index = 0});
  const KeyLayout layout = buildKeyLayout({{"w", 4}}, 1, 16);
  const Deadline deadline = Deadline::afterSeconds(5);
  Worker tcp({.servers = {{server.endpoint(), "ps 0"}}, .layout = layout, .mode = Mode::PsAsync,
              .shared_memory = true},
             tandem::testing::testSecurity());
  EXPECT_EQ(tcp.sharedArena(), nullptr) << "no server on this host's socket: nothing to share";
  ServerConfig config = makeConfig(Mode::PsAsync, 2, {{layout.chunks[0].key, 4}});
  config.layout_fingerprint = layout.fingerprint();
  tcp.initServers({config}, [](size_t, int64_t&) { return std::vector<float>(4, 1.0f); }, deadline);
  tcp.hello(deadline);
  EXPECT_EQ(tcp.serversSharingMemory(), 0);

  zmq::context_t context(1);
  Peer peer(context, server.endpoint());
  const auto hello = encode(Hello{1, layout.fingerprint(), 0});
  expectOk(peer.request({.type = ps::msg::kHello}, hello.data(), hello.size()));
  const std::vector<char> ref = net::encode(ArenaRef{0, 16});
  const FrameHeader push{.type = ps::msg::kPush, .flags = net::kFlagInArena, .key_begin = layout.chunks[0].key,
                         .key_end = layout.chunks[0].key + 1};
  const Frame refused = peer.request(push, ref.data(), ref.size());
  ASSERT_EQ(refused.header.type, MessageType::kError);
  EXPECT_NE(refused.text().find("worker 1 sent a ps-push naming shared memory, but none of its is mapped here"),
            std::string::npos)
      << refused.text();
  const Frame set = peer.request({.type = ps::msg::kLr, .flags = net::kFlagInArena}, ref.data(), ref.size());
  EXPECT_NE(set.text().find("ps-lr cannot name shared memory"), std::string::npos) << set.text();
  tcp.sayDone(deadline);
}

}  // namespace
}  // namespace tandem::ps::testing
