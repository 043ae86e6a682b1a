// A worker's side of --ps-replicas 2 when a server is lost: its requests
// go again to the chunk's other holder (the step clocks' to ps 1), an
// async push the lost primary left unanswered goes to the backup, and each
// loss is announced once. Replacements taken back: worker_replacement.cpp.
#include <fmt/format.h>

#include <algorithm>

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
  if (c == SIZE_MAX) {
    // The clocks: ps 0 and ps 1 keep them with replicas.
    if (options_.layout.replicas() < 2 || client_->lost(server == 0 ? 1 : 0)) return false;
  } else {
    const Chunk& chunk = options_.layout.chunks[c];
    const int other = chunk.server == server ? chunk.backup : chunk.server;
    if (other < 0 || client_->lost(other)) return false;
  }
  noteLost(server);
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
  if (!primaryForwards() || push_tickets_[c].size() < 2 || push_tickets_[c][1].valid()) return;
  const std::vector<int> holders = options_.layout.chunks[c].holders();
  const auto [data, step] = pushed_[c];
  if (data == nullptr || !client_->lost(holders[0]) || client_->lost(holders[1])) return;
  net::FrameHeader header = chunkHeader(msg::kPush, c, step);
  zmq::message_t payload = pushPayload(c, holders[1], data, header);
  push_tickets_[c][1] = client_->send(holders[1], header, std::move(payload));
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
  for (int keeper = 0;; ++keeper) {
    const bool another = keeper + 1 < keepers;
    if (another && client_->lost(keeper) && failOver(keeper, SIZE_MAX)) continue;
    try {
      return {keeper, client_->send(keeper, header, zmq::message_t()).wait(deadline, what)};
    } catch (const PeerError&) {
      if (another && failOver(keeper, SIZE_MAX)) continue;
      throw;
    }
  }
}

}  // namespace tandem::ps
