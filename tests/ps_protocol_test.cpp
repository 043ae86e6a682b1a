// The parameter server's binary payloads, each declared once
// (ps/message_fields.hpp): the bytes are the ones the wire has always
// carried (spelled out here field by field with PayloadWriter), every
// message reads back what was written, and a payload cut short, grown
// long or with a bad field is an InputError naming the peer and field.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "net/wire.hpp"
#include "ps/protocol.hpp"
#include "support/expect_input_error.hpp"

namespace tandem::ps {
namespace {

using tandem::testing::expectInputError;

std::span<const std::byte> bytesOf(const std::vector<char>& v) { return std::as_bytes(std::span(v)); }

std::vector<char> cut(std::vector<char> v, size_t drop) {
  v.resize(v.size() - drop);
  return v;
}

std::vector<char> grown(std::vector<char> v) {
  v.push_back('x');
  return v;
}

uint64_t bits(double v) { return std::bit_cast<uint64_t>(v); }

TEST(PsProtocol, HelloKeepsItsWireBytesAndRoundTripsWithAndWithoutSharedMemory) {
  Hello plain{.worker = 3, .layout_fingerprint = 0x1122334455667788, .generation = 9, .sync_join = 12};
  net::PayloadWriter w;
  w.putU32(3);
  w.putU64(0x1122334455667788);
  w.putU64(9);
  w.putU32(12);
  EXPECT_EQ(encode(plain), w.bytes());
  const Hello back = decodeHello(bytesOf(encode(plain)), "worker 3");
  EXPECT_EQ(back.worker, 3u);
  EXPECT_EQ(back.layout_fingerprint, plain.layout_fingerprint);
  EXPECT_EQ(back.generation, 9u);
  EXPECT_EQ(back.sync_join, 12u);
  EXPECT_FALSE(back.arena);

  Hello shared = plain;
  shared.arena = net::ArenaHandle{.pid = 77, .fd = -5, .bytes = 4096, .token = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};
  w.putU32(77);
  w.putU32(static_cast<uint32_t>(-5));
  w.putU64(4096);
  w.putRaw(shared.arena->token.data(), shared.arena->token.size());
  EXPECT_EQ(encode(shared), w.bytes());
  EXPECT_EQ(decodeHello(bytesOf(encode(shared)), "worker 3").arena, shared.arena);

  expectInputError([&] { decodeHello(bytesOf(cut(encode(plain), 1)), "worker 3"); },
                   {"frame from worker 3", "ps-hello payload truncated at sync join step"});
  expectInputError([&] { decodeHello(bytesOf(cut(encode(shared), 1)), "worker 3"); },
                   {"worker 3: ps-hello payload: shared-memory token of 15 bytes, expected 16"});
  expectInputError([&] { decodeHello(bytesOf(grown(encode(shared))), "worker 3"); },
                   {"shared-memory token of 17 bytes, expected 16"});
}

TEST(PsProtocol, HelloAnswerRoundTripsAndRefusesABadFlagOrAClockBeforeTheStart) {
  const HelloAnswer a{.clock = 12, .start_step = 10, .arena_mapped = true, .fed = true, .finished = true};
  net::PayloadWriter w;
  w.putU32(12);
  w.putU32(10);
  w.putU32(1);
  w.putU32(1);
  w.putU32(1);
  EXPECT_EQ(encode(a), w.bytes());
  const HelloAnswer back = decodeHelloAnswer(bytesOf(encode(a)), "ps 0");
  EXPECT_EQ(back.clock, 12u);
  EXPECT_EQ(back.start_step, 10u);
  EXPECT_TRUE(back.arena_mapped);
  EXPECT_TRUE(back.fed);
  EXPECT_TRUE(back.finished);

  net::PayloadWriter bad_flag;
  bad_flag.putU32(12);
  bad_flag.putU32(10);
  bad_flag.putU32(2);
  bad_flag.putU32(0);
  bad_flag.putU32(0);
  expectInputError([&] { decodeHelloAnswer(bytesOf(bad_flag.bytes()), "ps 0"); },
                   {"ps 0: hello answer: shared-memory flag 2 is neither 0 nor 1"});
  expectInputError([&] { decodeHelloAnswer(bytesOf(encode(HelloAnswer{.clock = 3, .start_step = 4})), "ps 0"); },
                   {"ps 0: hello answer: clock 3 is before the start step 4"});
  expectInputError([&] { decodeHelloAnswer(bytesOf(cut(encode(a), 12)), "ps 0"); },
                   {"hello answer truncated at shared memory"});
  expectInputError([&] { decodeHelloAnswer(bytesOf(grown(encode(a))), "ps 0"); },
                   {"hello answer has 1 unexpected trailing bytes"});
}

TEST(PsProtocol, SnapshotPointHoldsExactlyTheWorkersClocksAndReservesOnlyWhatArrived) {
  const SnapshotPoint p{.global_step = 1234, .clocks = {5, 0, 7}};
  net::PayloadWriter w;
  w.putU64(1234);
  w.putU32(3);
  for (uint32_t c : p.clocks) w.putU32(c);
  EXPECT_EQ(encode(p), w.bytes());
  const SnapshotPoint back = decodeSnapshotPoint(bytesOf(encode(p)), 3, "ps 0");
  EXPECT_EQ(back.global_step, 1234u);
  EXPECT_EQ(back.clocks, p.clocks);
  EXPECT_EQ(decodeSnapshotPoint(bytesOf(encode(p)), 0, "ps 0").clocks, p.clocks) << "0 workers: any count";

  expectInputError([&] { decodeSnapshotPoint(bytesOf(encode(p)), 2, "worker 1"); },
                   {"worker 1: snapshot point: 3 clocks for 2 worker(s)"});
  expectInputError([&] { decodeSnapshotPoint(bytesOf(cut(encode(p), 4)), 3, "worker 1"); },
                   {"snapshot point truncated at clock"});
  expectInputError([&] { decodeSnapshotPoint(bytesOf(grown(encode(p))), 3, "worker 1"); },
                   {"snapshot point has 1 unexpected trailing bytes"});
  // A count of four billion with no clocks behind it fails at the bytes' end.
  net::PayloadWriter liar;
  liar.putU64(0);
  liar.putU32(0xFFFFFFFF);
  expectInputError([&] { decodeSnapshotPoint(bytesOf(liar.bytes()), 0, "worker 1"); },
                   {"snapshot point truncated at clock"});
}

TEST(PsProtocol, StepReportAndAgreementKeepTheirWireBytesAndFlagWord) {
  const StepReport r{.loss = 0.25, .compute_seconds = 1.5, .stop = true, .checkpoint = true, .rejoining_server = 1};
  net::PayloadWriter w;
  w.putU64(bits(0.25));
  w.putU64(bits(1.5));
  w.putU32(3);
  w.putU32(1);
  EXPECT_EQ(encode(r), w.bytes());
  const StepReport rb = decodeStepReport(bytesOf(encode(r)), "worker 2");
  EXPECT_EQ(rb.loss, 0.25);
  EXPECT_EQ(rb.compute_seconds, 1.5);
  EXPECT_TRUE(rb.stop);
  EXPECT_TRUE(rb.checkpoint);
  EXPECT_EQ(rb.rejoining_server, 1u);
  EXPECT_FALSE(decodeStepReport(bytesOf(encode(StepReport{.checkpoint = true})), "w").stop);
  EXPECT_EQ(decodeStepReport(bytesOf(encode(StepReport{})), "w").rejoining_server, kNoServer);

  const StepAgreement a{.loss = -2.0, .slowest_compute_seconds = 0.5, .stop = false, .slowest_clock = 41,
                        .global_step = 1ull << 40, .finished = true, .checkpoint = true};
  net::PayloadWriter wa;
  wa.putU64(bits(-2.0));
  wa.putU64(bits(0.5));
  wa.putU32(2);
  wa.putU32(41);
  wa.putU64(1ull << 40);
  wa.putU32(1);
  wa.putU32(kNoServer);
  EXPECT_EQ(encode(a), wa.bytes());
  const StepAgreement ab = decodeStepAgreement(bytesOf(encode(a)), "ps 0");
  EXPECT_EQ(ab.loss, -2.0);
  EXPECT_EQ(ab.slowest_compute_seconds, 0.5);
  EXPECT_FALSE(ab.stop);
  EXPECT_TRUE(ab.checkpoint);
  EXPECT_EQ(ab.slowest_clock, 41u);
  EXPECT_EQ(ab.global_step, 1ull << 40);
  EXPECT_TRUE(ab.finished);

  expectInputError([&] { decodeStepReport(bytesOf(cut(encode(r), 1)), "worker 2"); },
                   {"frame from worker 2", "ps-clock payload truncated at rejoining server"});
  expectInputError([&] { decodeStepReport(bytesOf(grown(encode(r))), "worker 2"); },
                   {"ps-clock payload has 1 unexpected trailing bytes"});
  expectInputError([&] { decodeStepAgreement(bytesOf(cut(encode(a), 4)), "ps 0"); },
                   {"ps-clock reply truncated at rejoining server"});
  expectInputError([&] { decodeStepAgreement(bytesOf(cut(encode(a), 8)), "ps 0"); },
                   {"ps-clock reply truncated at finished"});
  expectInputError([&] { decodeStepAgreement({}, "ps 0"); }, {"ps-clock reply truncated at loss"});
}

TEST(PsProtocol, AServerStatusIsTwoFlagWords) {
  net::PayloadWriter w;
  w.putU32(1);
  w.putU32(0);
  EXPECT_EQ(encode(ServerStatus{.initialised = true}), w.bytes());
  EXPECT_TRUE(decodeServerStatus(bytesOf(w.bytes()), "ps 1").initialised);
  EXPECT_FALSE(decodeServerStatus(bytesOf(w.bytes()), "ps 1").ready);
  EXPECT_TRUE(decodeServerStatus(bytesOf(encode(ServerStatus{.initialised = true, .ready = true})), "ps 1").ready);
  EXPECT_FALSE(decodeServerStatus(bytesOf(encode(ServerStatus{})), "ps 1").initialised);
  net::PayloadWriter bad;
  bad.putU32(7);
  bad.putU32(0);
  expectInputError([&] { decodeServerStatus(bytesOf(bad.bytes()), "ps 1"); }, {"ps 1", "initialised flag"});
  expectInputError([&] { decodeServerStatus({}, "ps 1"); }, {"ps-status reply truncated at initialised"});
}

// A replacement's messages: what the chief asks a holder, the chunk the
// holder copies, and where the workers stand. Bad ones name the field.
TEST(PsProtocol, AReplicaRequestACopyAndAMirrorRoundTripAndRefuseBadFields) {
  const ReplicaRequest ask{.server = 1, .endpoint = "tcp://h:1", .name = "ps 1", .keys = {3, 5}};
  const ReplicaRequest back = decodeReplicaRequest(bytesOf(encode(ask)), "the chief");
  EXPECT_EQ(back.server, 1u);
  EXPECT_EQ(back.endpoint, "tcp://h:1");
  EXPECT_EQ(back.keys, (std::vector<uint64_t>{3, 5}));
  const std::string no_keys = R"({"server":1,"endpoint":"tcp://h:1","name":"ps 1","keys":[]})";
  expectInputError([&] { decodeReplicaRequest(std::as_bytes(std::span(no_keys)), "the chief"); },
                   {"the chief", "ps-replicate", "at least one chunk key"});
  expectInputError([&] { decodeReplicaRequest(std::as_bytes(std::span(std::string_view("{"))), "the chief"); },
                   {"ps-replicate is not JSON"});

  const std::vector<float> state{1, 2, 3, 4, 5, 6};
  const CopyHead head{.applied = 9, .pushed_through = {4, 5}, .pulled_at = {}};
  const std::vector<char> copy = encodeCopy(head, std::as_bytes(std::span(state)));
  std::span<const std::byte> rest;
  const CopyHead got = decodeCopy(bytesOf(copy), 2, "ps 1", rest);
  EXPECT_EQ(got.applied, 9u);
  EXPECT_EQ(got.pushed_through, head.pushed_through);
  ASSERT_EQ(rest.size(), state.size() * sizeof(float));
  EXPECT_EQ((rest.data() - bytesOf(copy).data()) % 8, 0) << "the state does not start 8-byte aligned";
  EXPECT_EQ(std::memcmp(rest.data(), state.data(), rest.size()), 0);
  expectInputError([&] { decodeCopy(bytesOf(copy), 3, "ps 1", rest); }, {"ps 1", "ps-copy head", "for 3 worker(s)"});
  expectInputError([&] { decodeCopy(std::span(bytesOf(copy)).first(6), 2, "ps 1", rest); },
                   {"ps-copy head", "does not fit"});

  WorkerMirror mirror;
  mirror.has_clocks = true;
  mirror.clocks = {3, 4};
  mirror.done = {false, true};
  mirror.lost = {false, false};
  mirror.holds_grant = {true, false};
  mirror.granted = 8;
  mirror.reported = 7;
  mirror.lr = {0.25, std::nan("")};
  const WorkerMirror m = decodeWorkerMirror(bytesOf(encode(mirror)), 2, "ps 1");
  EXPECT_EQ(m.clocks, mirror.clocks);
  EXPECT_EQ(m.done, mirror.done);
  EXPECT_EQ(m.granted, 8u);
  EXPECT_EQ(m.lr[0], 0.25);
  EXPECT_TRUE(std::isnan(m.lr[1])) << "a worker on the table's rate got one";
  expectInputError([&] { decodeWorkerMirror(bytesOf(encode(mirror)), 3, "ps 1"); }, {"ps-mirror", "3 worker(s)"});
  mirror.lr[0] = -1;
  expectInputError([&] { decodeWorkerMirror(bytesOf(encode(mirror)), 2, "ps 1"); },
                   {"ps-mirror", "rate -1", "finite non-negative"});
}

// A primary's forward carries what it decided on the push's arrival, so
// its backup applies the push alike: the rate, and the staleness its
// momentum is corrected for (--async-momentum-correction).
TEST(PsProtocol, AForwardHeadCarriesTheRateAndTheStalenessAndKeepsTheGradientAligned) {
  const std::vector<float> grad{1, 2, 3};
  const ForwardHead head{.worker = 2, .clock = 7, .update = 40, .lr = 0.0125, .staleness = 4, .mean_staleness = 2.95};
  const std::vector<char> bytes = encodeForward(head, std::as_bytes(std::span(grad)));
  ASSERT_EQ(bytes.size(), kForwardHeadBytes + grad.size() * sizeof(float));
  EXPECT_EQ(kForwardHeadBytes % 8, 0u) << "the gradient would not start 8-byte aligned";
  std::span<const std::byte> rest;
  const ForwardHead got = decodeForward(bytesOf(bytes), "ps 0", rest);
  EXPECT_EQ(got.worker, 2u);
  EXPECT_EQ(got.clock, 7u);
  EXPECT_EQ(got.update, 40u);
  EXPECT_EQ(got.lr, 0.0125);
  EXPECT_EQ(got.staleness, 4u);
  EXPECT_EQ(got.mean_staleness, 2.95);
  ASSERT_EQ(rest.size(), grad.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(rest.data(), grad.data(), rest.size()), 0);
  expectInputError([&] { decodeForward(std::span(bytesOf(bytes)).first(kForwardHeadBytes - 1), "ps 0", rest); },
                   {"frame from ps 0", "shorter than its 40-byte head"});
  for (const double bad : {-1.0, std::nan("")}) {
    ForwardHead wrong = head;
    wrong.mean_staleness = bad;
    expectInputError([&] { decodeForward(bytesOf(encodeForward(wrong, {})), "ps 0", rest); },
                     {"frame from ps 0", "mean staleness", "not a finite non-negative number"});
  }
}

TEST(PsProtocol, ALearningRateIsOneFloat64AndNothingElse) {
  net::PayloadWriter w;
  w.putU64(bits(0.125));
  EXPECT_EQ(encode(LearningRate{0.125}), w.bytes());
  EXPECT_EQ(decodeLearningRate(bytesOf(encode(LearningRate{0.125})), "worker 1").lr, 0.125);
  EXPECT_EQ(decodeLearningRate(bytesOf(encode(LearningRate{0})), "worker 1").lr, 0);
  expectInputError([&] { decodeLearningRate(bytesOf(cut(encode(LearningRate{1}), 1)), "worker 1"); },
                   {"frame from worker 1", "ps-lr payload truncated at learning rate"});
  expectInputError([&] { decodeLearningRate(bytesOf(grown(encode(LearningRate{1}))), "worker 1"); },
                   {"ps-lr payload has 1 unexpected trailing bytes"});
  for (const double bad : {-0.5, std::numeric_limits<double>::infinity(), std::nan("")}) {
    expectInputError([&] { decodeLearningRate(bytesOf(encode(LearningRate{bad})), "worker 1"); },
                     {"frame from worker 1", "learning rate", "not a finite non-negative number"});
  }
}

}  // namespace
}  // namespace tandem::ps
