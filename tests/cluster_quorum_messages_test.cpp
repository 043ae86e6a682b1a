// The quorum's payloads: what is encoded comes back equal, and a payload a
// peer got wrong is refused naming the field.
#include <gtest/gtest.h>

#include "cluster/quorum_messages.hpp"
#include "core/error.hpp"
#include "net/wire.hpp"

namespace tandem::cluster {
namespace {

std::span<const std::byte> span(const std::vector<char>& v) {
  return {reinterpret_cast<const std::byte*>(v.data()), v.size()};
}

std::string refusal(const std::vector<char>& payload) {
  try {
    decodeQuorumView(span(payload), "worker 7");
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

QuorumView sampleView() {
  QuorumView v;
  v.current.generation = 3;
  v.current.step = 1234;
  v.current.workers = {0, 2, 5, 9};
  v.current.source = 2;
  v.current.healing = {5, 9};
  v.current.joined = {9};
  // Worker 9's new process came back before its old one was taken for dead.
  v.current.departed = {{1, "silent for 5.2s"}, {3, "left"}, {9, "its process restarted"}};
  v.round_open = true;
  v.awaited = {0, 5};
  v.stopped = "stopped for a test";
  return v;
}

TEST(QuorumMessages, AViewAndARequestComeBackEqual) {
  const QuorumView v = sampleView();
  const QuorumView back = decodeQuorumView(span(encodeQuorumView(v)), "the coordinator");
  EXPECT_EQ(back.current, v.current);
  EXPECT_EQ(back.round_open, v.round_open);
  EXPECT_EQ(back.awaited, v.awaited);
  EXPECT_EQ(back.stopped, v.stopped);
  const QuorumView empty;
  EXPECT_EQ(decodeQuorumView(span(encodeQuorumView(empty)), "c").current, empty.current);
  const QuorumRequest r{17, 4, -1};
  const QuorumRequest rb = decodeQuorumRequest(span(encodeQuorumRequest(r)), "worker 17", "quorum-arrive payload");
  EXPECT_EQ(rb.worker, 17);
  EXPECT_EQ(rb.generation, 4);
  EXPECT_EQ(rb.step, -1);
}

TEST(QuorumMessages, AViewThatCannotHoldIsRefusedNamingTheField) {
  QuorumView v = sampleView();
  v.current.workers = {0, 5, 2, 9};
  EXPECT_EQ(refusal(encodeQuorumView(v)),
            "frame from worker 7: quorum-view payload workers: worker 2 after 5: not ascending");
  v = sampleView();
  v.current.healing = {5, 7};
  EXPECT_EQ(refusal(encodeQuorumView(v)),
            "frame from worker 7: quorum-view payload healing: names a worker that is not a member");
  v = sampleView();
  v.current.source = 1;
  EXPECT_EQ(refusal(encodeQuorumView(v)), "frame from worker 7: quorum-view payload source: worker 1 is not a member");
  v = sampleView();
  v.current.source = -1;
  EXPECT_EQ(refusal(encodeQuorumView(v)),
            "frame from worker 7: quorum-view payload source: a source exactly when some member is healing");
  v = sampleView();
  v.current.departed = {{2, "but still here"}};
  EXPECT_EQ(refusal(encodeQuorumView(v)),
            "frame from worker 7: quorum-view payload departed: worker 2 is still a member and did not join again");
  v = sampleView();
  v.awaited = {1};
  EXPECT_EQ(refusal(encodeQuorumView(v)),
            "frame from worker 7: quorum-view payload awaited: names a worker that is not a member");
  v = sampleView();
  v.current.workers = {0, 2, 5, kMaxQuorumWorkers};
  EXPECT_EQ(refusal(encodeQuorumView(v)),
            "frame from worker 7: quorum-view payload workers: worker 65536 is past the 65536 a job may have");
  std::vector<char> lying = encodeQuorumView(QuorumView{});
  lying[24] = '\x7f';  // the worker count claims 127 workers in the 32 bytes that follow
  EXPECT_NE(refusal(lying).find("workers: claims 127 workers in"), std::string::npos) << refusal(lying);
  std::vector<char> trailing = encodeQuorumView(QuorumView{});
  trailing.push_back('x');
  EXPECT_NE(refusal(trailing).find("quorum-view payload"), std::string::npos) << refusal(trailing);
}

TEST(QuorumMessages, ARequestOutOfRangeIsRefused) {
  auto refused = [](const QuorumRequest& r) {
    try {
      decodeQuorumRequest(span(encodeQuorumRequest(r)), "worker 3", "quorum-arrive payload");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refused({3, -1, 0}), "frame from worker 3: quorum-arrive payload generation: -1 is below 0");
  EXPECT_EQ(refused({3, 0, -2}), "frame from worker 3: quorum-arrive payload step: -2 is below -1");
  EXPECT_EQ(refused({-1, 0, 0}),
            "frame from worker 3: quorum-arrive payload worker: worker 4294967295 is past the 65536 a job may have");
}

// The chief's hosting request: what it sends comes back equal, and what
// cannot be a job's quorum is refused naming the field.
TEST(QuorumMessages, AHostingRequestComesBackEqualAndOutOfRangeIsRefused) {
  QuorumHosting h;
  h.workers = 8;
  h.first_step = 1200;
  h.options = {.min_workers = 4, .max_workers = 8, .heartbeat_timeout = std::chrono::milliseconds(5000),
               .suspect_after = std::chrono::milliseconds(1500), .beat_interval = std::chrono::milliseconds(500),
               .arrival_timeout = std::chrono::milliseconds(120000)};
  const QuorumHosting back = decodeQuorumHosting(span(encodeQuorumHosting(h)), "worker 0");
  EXPECT_EQ(back.workers, h.workers);
  EXPECT_EQ(back.first_step, h.first_step);
  EXPECT_EQ(back.options.min_workers, 4);
  EXPECT_EQ(back.options.max_workers, 8);
  EXPECT_EQ(back.options.heartbeat_timeout, h.options.heartbeat_timeout);
  EXPECT_EQ(back.options.suspect_after, h.options.suspect_after);
  EXPECT_EQ(back.options.beat_interval, h.options.beat_interval);
  EXPECT_EQ(back.options.arrival_timeout, h.options.arrival_timeout);
  auto refused = [](const QuorumHosting& bad) {
    try {
      decodeQuorumHosting(span(encodeQuorumHosting(bad)), "worker 0");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  QuorumHosting none = h;
  none.workers = 0;
  EXPECT_EQ(refused(none), "frame from worker 0: quorum-host payload workers: a job needs at least one");
  QuorumHosting back_in_time = h;
  back_in_time.first_step = -5;
  EXPECT_EQ(refused(back_in_time), "frame from worker 0: quorum-host payload first step: -5 is below 0");
  QuorumHosting forever = h;
  forever.options.arrival_timeout = std::chrono::hours(25);
  EXPECT_EQ(refused(forever), "frame from worker 0: quorum-host payload arrival timeout: 90000000 ms is more than a day");
}

}  // namespace
}  // namespace tandem::cluster
