// A worker's side of --ps-replicas 2 when a server is lost: its requests
// go again to the chunk's other holder (the step clocks' to ps 1), an
// async push the lost primary left unanswered goes to the backup, and each
// loss is announced once. Async: when both holders are lost, a replacement
// brought up at either address takes over; a joining worker sets aside
// servers that do not answer, or that the other holders still feed.
// Replacements taken back or brought up: worker_replacement.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "core/error.hpp"
#include "core/logging.hpp"
#include "ps/messages.hpp"
#include "ps/worker.hpp"

namespace tandem::ps {

void Worker::rethrowUnlessHeld(size_t c, int server, const PeerError& failure) {
  if (failOver(server, c)) return;
  const Chunk& chunk = options_.layout.chunks[c];
  if (chunk.backup < 0 || !client_->lost(chunk.server) || !client_->lost(chunk.backup)) throw failure;
  throw PeerError(fmt::format("chunk {}: its servers ps {} and ps {} are lost, and no replica of it is left ({})", c,
                              chunk.server, chunk.backup, failure.what()));
}

bool Worker::failOver(int server, size_t c) {
  if (!client_->lost(server)) return false;
  int other = -1;
  if (c == SIZE_MAX) {
    // The clocks: ps 0 and ps 1 keep them with replicas.
    if (options_.layout.replicas() < 2 || servers() < 2) return false;
    other = server == 0 ? 1 : 0;
  } else {
    const Chunk& chunk = options_.layout.chunks[c];
    other = chunk.server == server ? chunk.backup : chunk.server;
    if (other < 0) return false;
  }
  if (client_->lost(other)) {
    // Both lost: a replacement brought up at either address may take over.
    if (turnToReplacement(other)) {
      noteLost(server);
      return true;
    }
    return turnToReplacement(server);
  }
  noteLost(server);
  return true;
}

int Worker::liveKeeper() {
  const int keepers = std::min(servers(), options_.layout.replicas());
  for (int k = 0; k < keepers; ++k) {
    if (!client_->lost(k)) return k;
  }
  for (int k = 0; k < keepers && keepers > 1; ++k) {
    if (turnToReplacement(k)) return k;
  }
  return -1;
}

bool Worker::turnToReplacement(int server) {
  if (!primaryForwards() || !client_->lost(server)) return false;
  const std::string& name = options_.servers[static_cast<size_t>(server)].name;
  try {
    // Its own connection first: a dead address would hold the hello until its deadline.
    PsClient probe({options_.servers[static_cast<size_t>(server)]}, security_, net::kMaxPayloadBytes,
                   options_.liveness);
    const net::Frame status =
        probe.send(0, {.type = msg::kStatus}, zmq::message_t()).wait(Deadline::afterSeconds(5), "ps-status");
    if (!decodeServerStatus(status.bytes(), name).ready) return false;
    client_->revive(server);
    greetRevived(server, Deadline::afterSeconds(30), "hello (a replacement brought up)");
  } catch (const Error& e) {
    TANDEM_LOG_DEBUG("worker {}: no replacement of {} to turn to: {}", options_.index, name, e.what());
    return false;
  }
  TANDEM_LOG_WARN("worker {}: {}'s replacement, copied from the other holders, takes this worker's requests "
                  "(--ps-replicas 2)",
                  options_.index, name);
  return true;
}

void Worker::noteLost(int server) const {
  std::lock_guard lock(lost_mutex_);
  if (std::find(announced_lost_.begin(), announced_lost_.end(), server) != announced_lost_.end()) return;
  announced_lost_.push_back(server);
  losses_.push_back(server);
  TANDEM_LOG_WARN("worker {}: {} is lost; its chunks go on at their other replica, and no update is lost "
                  "(--ps-replicas 2)",
                  options_.index, options_.servers[static_cast<size_t>(server)].name);
}

std::vector<int> Worker::lostServers() const {
  std::lock_guard lock(lost_mutex_);
  return losses_;
}

void Worker::repushToBackup(size_t c) {
  const std::vector<int> holders = options_.layout.chunks[c].holders();
  if (!primaryForwards() || push_tickets_[c].size() < holders.size()) return;
  const auto [data, step] = pushed_[c];
  if (data == nullptr) return;
  // The first holder alive takes the push, unless it has it already.
  for (size_t r = 0; r < holders.size(); ++r) {
    if (client_->lost(holders[r])) continue;
    if (push_tickets_[c][r].valid()) return;
    net::FrameHeader header = chunkHeader(msg::kPush, c, step);
    zmq::message_t payload = pushPayload(c, holders[r], data, header);
    push_tickets_[c][r] = client_->send(holders[r], header, std::move(payload));
    return;
  }
}

void Worker::repushPastLostPrimaries() {
  if (!primaryForwards()) return;
  std::lock_guard lock(window_mutex_);
  for (size_t c = 0; c < push_tickets_.size(); ++c) {
    if (!push_tickets_[c].empty() && client_->lost(options_.layout.chunks[c].server)) repushToBackup(c);
  }
}

int Worker::pullTarget(size_t c) const {
  const std::vector<int> holders = options_.layout.chunks[c].holders();
  for (int server : holders) {
    if (!client_->lost(server)) return server;
    if (holders.size() > 1) noteLost(server);
  }
  return serverOf(c);  // every holder lost: the pull fails, and receivePulls names them
}

std::pair<int, net::Frame> Worker::askClockKeeper(net::FrameHeader header, Deadline deadline, const std::string& what) {
  const int keepers = std::min(servers(), options_.layout.replicas());
  for (;;) {
    const int keeper = std::max(0, liveKeeper());  // every keeper lost: the request fails, naming ps 0
    try {
      return {keeper, client_->send(keeper, header, zmq::message_t()).wait(deadline, what, [this] {
                repushPastLostPrimaries();
              })};
    } catch (const PeerError&) {
      if (keepers > 1 && failOver(keeper, SIZE_MAX)) continue;
      throw;
    }
  }
}

void Worker::setAsideSilentServers() {
  std::vector<Ticket> tickets;
  for (int i = 0; i < servers(); ++i) tickets.push_back(client_->send(i, {.type = msg::kStatus}, zmq::message_t()));
  std::vector<std::optional<bool>> ready(tickets.size());  // empty: nothing answered
  for (size_t i = 0; i < tickets.size(); ++i) {
    try {
      ready[i] = decodeServerStatus(tickets[i].wait(Deadline::afterSeconds(5), "ps-status").bytes(),
                                    options_.servers[i].name).ready;
    } catch (const PeerError&) {
    }
  }
  // Once the job is set up, one not set up is a replacement the chief has
  // not reached: it would hold the hello until the chief does, and the
  // chief may be waiting on this worker (a checkpoint's pause).
  const bool job_set_up = std::find(ready.begin(), ready.end(), std::optional(true)) != ready.end();
  for (int i = 0; i < servers(); ++i) {
    const std::string& name = options_.servers[static_cast<size_t>(i)].name;
    const std::optional<bool> answer = ready[static_cast<size_t>(i)];
    const bool silent = !answer, not_set_up = job_set_up && answer == std::optional(false);
    if (!silent && !not_set_up) continue;
    if (!othersHoldEveryChunkOf(i)) {
      if (not_set_up) continue;  // its hello waits for the chief, the only way on
      throw PeerError(fmt::format("worker {}: nothing answered at {}'s address within 5s of its start, and its "
                                  "chunks have no other live holder", options_.index, name));
    }
    client_->setAside(i, silent ? fmt::format("nothing answered at {}'s address within 5s of this worker's start", name)
                                : fmt::format("{} is a replacement the chief has not set up yet", name));
    noteLost(i);
  }
}

bool Worker::othersHoldEveryChunkOf(int server) const {
  for (const Chunk& chunk : options_.layout.chunks) {
    if (!chunk.heldBy(server)) continue;
    const std::vector<int> holders = chunk.holders();
    if (std::none_of(holders.begin(), holders.end(), [&](int h) { return h != server && !client_->lost(h); })) {
      return false;
    }
  }
  return true;
}

}  // namespace tandem::ps
