#include "ps/worker.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "obs/timeline.hpp"

namespace tandem::ps {

using net::MessageType;

Worker::Worker(WorkerOptions options)
    : options_(std::move(options)), client_(std::make_unique<PsClient>(options_.servers)) {
  push_tickets_.resize(options_.layout.chunks.size());
  pull_tickets_.resize(options_.layout.chunks.size());
}

Worker::~Worker() = default;

net::FrameHeader Worker::chunkHeader(MessageType type, size_t c, int64_t clock) const {
  const auto& chunk = options_.layout.chunks[c];
  return {.type = type, .clock = static_cast<uint32_t>(clock), .key_begin = chunk.key, .key_end = chunk.key + 1};
}

void Worker::initServers(const std::vector<ServerConfig>& configs, const ChunkValues& values, Deadline deadline) {
  std::vector<Ticket> tickets;
  for (int i = 0; i < servers(); ++i) {
    const std::string json = toJson(configs.at(static_cast<size_t>(i))).dump();
    tickets.push_back(client_->send(i, {.type = MessageType::kPsInit}, net::copyPayload(json)));
  }
  for (size_t c = 0; c < options_.layout.chunks.size(); ++c) {
    int64_t applied = 0;
    const std::vector<float> floats = values(c, applied);
    tickets.push_back(client_->send(serverOf(c), chunkHeader(MessageType::kPsSet, c, applied),
                                    net::copyPayload(floats.data(), floats.size() * sizeof(float))));
  }
  for (auto& t : tickets) t.wait(deadline, "the initial parameters");
}

void Worker::hello(Deadline deadline) {
  const auto hello = encode(Hello{options_.index, options_.layout.fingerprint()});
  std::vector<Ticket> tickets;
  for (int i = 0; i < servers(); ++i) {
    tickets.push_back(client_->send(i, {.type = MessageType::kPsHello}, net::copyPayload(hello)));
  }
  for (auto& t : tickets) t.wait(deadline, "hello (is the chief up and the server initialised?)");
}

void Worker::push(size_t c, const void* data, int64_t step) {
  auto payload = net::sharedPayload(std::shared_ptr<const void>(data, [](const void*) {}), data, chunkWireBytes(c));
  push_tickets_[c] = client_->send(serverOf(c), chunkHeader(MessageType::kPsPush, c, step), std::move(payload));
  // The pull goes out at once: the server answers it when the update is
  // applied, so apply and transfer overlap the rest of backward.
  if (options_.mode != Mode::kBounded) pull(c, options_.mode == Mode::kSync ? step + 1 : 0);
}

void Worker::pull(size_t c, int64_t needed) {
  pull_tickets_[c] = client_->send(serverOf(c), chunkHeader(MessageType::kPsPull, c, needed), zmq::message_t());
}

void Worker::pullAll(int64_t needed) {
  for (size_t c = 0; c < options_.layout.chunks.size(); ++c) pull(c, needed);
}

// --timeline: a push (queued until the server took it) or a pull (queued
// until its version arrived) on the communication lane.
void Worker::trace(const char* what, size_t c, const Ticket& ticket, int64_t step) const {
  auto* timeline = obs::Timeline::current();
  if (timeline == nullptr) return;
  const Ticket::Times t = ticket.times();
  if (t.replied_us == 0) return;
  timeline->span(fmt::format("{} chunk {}", what, c), obs::Lane::kComm, t.queued_us, t.replied_us,
                 {{"server", serverOf(c)}, {"bytes", chunkWireBytes(c)}, {"step", step}});
}

void Worker::receivePulls(Deadline deadline, int64_t step, const std::function<void(size_t, const net::Frame&)>& sink) {
  for (size_t c = 0; c < options_.layout.chunks.size(); ++c) {
    if (!pull_tickets_[c].valid()) continue;  // pulled by a host-mate (hierarchical)
    net::Frame frame = pull_tickets_[c].wait(deadline, fmt::format("the pull of chunk {} for step {}", c, step));
    trace("pull", c, pull_tickets_[c], step);
    pull_tickets_[c] = Ticket();
    const size_t expected = chunkWireBytes(c);
    if (frame.payload.size() != expected) {
      throw PeerError(fmt::format("ps {} sent {} bytes for chunk {} ({} expected)", serverOf(c), frame.payload.size(),
                                  c, expected));
    }
    sink(c, frame);
  }
}

StepAgreement Worker::reportStep(int64_t finished, const StepReport& report, Deadline deadline) {
  Ticket clock = client_->send(0, {.type = MessageType::kPsClock, .clock = static_cast<uint32_t>(finished)},
                               net::copyPayload(encode(report)));
  net::Frame reply = clock.wait(deadline, fmt::format("the end of step {}", finished - 1));
  return decodeStepAgreement(reply.bytes(), "ps 0");
}

void Worker::awaitPushes(Deadline deadline, int64_t step) {
  for (size_t c = 0; c < push_tickets_.size(); ++c) {
    if (!push_tickets_[c].valid()) continue;
    push_tickets_[c].wait(deadline, fmt::format("the push of chunk {} for step {}", c, step));
    trace("push", c, push_tickets_[c], step);
    push_tickets_[c] = Ticket();
  }
  for (auto& t : lr_tickets_) t.wait(deadline, "the learning rate");
  lr_tickets_.clear();
}

StepAgreement Worker::awaitWorkers(int64_t step, Deadline deadline) {
  Ticket ticket = client_->send(0, {.type = MessageType::kPsAwaitWorkers, .clock = static_cast<uint32_t>(step)},
                                zmq::message_t());
  net::Frame reply = ticket.wait(deadline, "the other workers' last steps");
  return decodeStepAgreement(reply.bytes(), "ps 0");
}

std::vector<net::Frame> Worker::fetchState(int64_t version, Deadline deadline) {
  std::vector<Ticket> tickets;
  for (size_t c = 0; c < options_.layout.chunks.size(); ++c) {
    tickets.push_back(client_->send(serverOf(c), chunkHeader(MessageType::kPsState, c, version), zmq::message_t()));
  }
  std::vector<net::Frame> frames;
  for (size_t c = 0; c < tickets.size(); ++c) {
    frames.push_back(tickets[c].wait(deadline, fmt::format("the optimizer state of chunk {}", c)));
  }
  return frames;
}

void Worker::setLearningRate(double lr) {
  if (sent_lr_ == lr) return;
  double value = lr;
  for (int i = 0; i < servers(); ++i) {
    // Sent before this step's pushes on the same connection: they see it.
    lr_tickets_.push_back(client_->send(i, {.type = MessageType::kPsLr}, net::copyPayload(&value, sizeof(value))));
  }
  sent_lr_ = lr;
}

void Worker::sayDone(Deadline deadline) {
  if (done_) return;
  done_ = true;
  std::vector<Ticket> tickets;
  for (int i = 0; i < servers(); ++i) tickets.push_back(client_->send(i, {.type = MessageType::kPsDone}, zmq::message_t()));
  for (auto& t : tickets) t.wait(deadline, "the goodbye");
  client_.reset();  // hang up at once: a server closes once its workers have
}

}  // namespace tandem::ps
