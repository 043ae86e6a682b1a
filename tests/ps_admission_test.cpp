// Who may join a parameter server, and when (ps/admission): the orderings
// of a chief's init, its chunks and the workers' hellos, across a restart
// of the chief, with no socket and no sleep.
#include "ps/admission.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/ps_refusal.hpp"

namespace tandem::ps {
namespace {

using tandem::testing::refusalOf;

ServerConfig start(uint64_t generation, uint64_t replaces = 0, Mode mode = Mode::PsSync) {
  ServerConfig c;
  c.mode = mode;
  c.workers = 2;
  c.layout_fingerprint = 0xabc;
  c.generation = generation;
  c.replaces = replaces;
  return c;
}

Admission::HeldHello hello(int worker, uint64_t generation, uint64_t request_id = 1) {
  return {.routing = "w" + std::to_string(worker), .request_id = request_id,
          .hello = {.worker = static_cast<uint32_t>(worker), .layout_fingerprint = 0xabc, .generation = generation}};
}

std::vector<std::string> routings(const std::vector<Admission::HeldHello>& held) {
  std::vector<std::string> out;
  for (const auto& h : held) out.push_back(h.routing);
  return out;
}

TEST(Admission, HellosBeforeTheInitOrItsChunksWaitUntilTheStartIsReady) {
  Admission a;
  EXPECT_FALSE(a.admitNow(hello(1, 5, 10)));  // before any init
  EXPECT_FALSE(a.mayInit(start(5), "ps 0"));  // a first init
  a.initialised(start(5));
  EXPECT_FALSE(a.admitNow(hello(0, 5, 11)));  // chunks not all set yet
  EXPECT_FALSE(a.isReady());
  EXPECT_EQ(routings(a.ready()), (std::vector<std::string>{"w1", "w0"})) << "in the order they came";
  EXPECT_TRUE(a.isReady());
  EXPECT_TRUE(a.admitNow(hello(1, 5))) << "once ready, a hello of this start is answered at once";
  EXPECT_TRUE(a.ready().empty()) << "nothing is held twice";
}

// The chief failed and started again (generation 6 replaces 5): a worker
// of the new start may say hello before the new init reaches this server.
// It is held through the old start and answered once the new one is ready.
TEST(Admission, AHelloOfTheChiefsNextStartWaitsThroughTheOldOne) {
  Admission a;
  a.initialised(start(5));
  EXPECT_TRUE(a.ready().empty());
  EXPECT_FALSE(a.admitNow(hello(0, 6)));
  EXPECT_TRUE(a.ready().empty()) << "held for its own start, not released by this one";
  EXPECT_TRUE(a.mayInit(start(6, 5), "ps 0")) << "a start that replaces this one starts over";
  a.forget();
  EXPECT_FALSE(a.isReady());
  a.initialised(start(6, 5));
  EXPECT_EQ(routings(a.ready()), (std::vector<std::string>{"w0"}));
}

TEST(Admission, ASecondInitThatReplacesNothingHereIsRefused) {
  Admission a;
  a.initialised(start(5));
  EXPECT_NE(refusalOf([&] { a.mayInit(start(5), "ps 1"); }).find("ps 1 was already initialised"), std::string::npos);
  EXPECT_NE(refusalOf([&] { a.mayInit(start(7, 4), "ps 1"); }).find("0000000000000005"), std::string::npos)
      << "another job's chief, or a start that replaced another";
}

TEST(Admission, AHelloNamingNoWorkerOrAnotherLayoutIsRefusedNamingIt) {
  Admission a;
  a.initialised(start(5));
  Hello stranger{.worker = 2, .layout_fingerprint = 0xabc, .generation = 5};
  EXPECT_NE(refusalOf([&] { a.check(stranger); }).find("worker 2 does not exist: the cluster has 2 worker(s)"),
            std::string::npos);
  Hello other{.worker = 1, .layout_fingerprint = 0xdef, .generation = 5};
  EXPECT_NE(refusalOf([&] { a.check(other); }).find("worker 1 computed parameter layout 0000000000000def"),
            std::string::npos);
  EXPECT_EQ(refusalOf([&] { a.check(hello(1, 5).hello); }), "(not refused)");
}

TEST(Admission, OnlyAsyncAndSspJobsTakeAReplacementWorker) {
  Admission a;
  a.initialised(start(5));
  EXPECT_FALSE(a.elastic());
  EXPECT_NE(a.bindRefusal("worker 1 is already connected").reason.find("cannot take a replacement"), std::string::npos);
  for (Mode mode : {Mode::PsAsync, Mode::Ssp}) {
    a.initialised(start(5, 0, mode));
    EXPECT_TRUE(a.elastic());
    EXPECT_EQ(a.bindRefusal("worker 1 is already connected").reason, "worker 1 is already connected");
  }
}

}  // namespace
}  // namespace tandem::ps
