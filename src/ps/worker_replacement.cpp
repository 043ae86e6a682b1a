// A replacement for a lost server (sync, --ps-replicas 2). The chief finds
// it waiting, fresh, at the lost server's address; its next step report
// names it, so the step's agreement tells every worker at the same step
// boundary, before any of them pushes the next step; the chief then sets it
// up from its chunks' other holders as a resume would, and every worker
// connects to it anew. Its chunks have two holders again.
#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "core/error.hpp"
#include "core/logging.hpp"
#include "optim/kernels.hpp"
#include "ps/messages.hpp"
#include "ps/worker.hpp"

namespace tandem::ps {

std::optional<int> Worker::replacementWaiting() {
  if (options_.layout.replicas() < 2 || configs_.empty()) return std::nullopt;
  if (probe_ && !client_->lost(probe_->server)) probe_.reset();  // taken back since
  if (!probe_) {
    for (int i = 0; i < servers(); ++i) {
      if (!client_->lost(i) || not_replaceable_.contains(i) || brought_up_.contains(i)) continue;
      // Its own connection: the worker's to this address stays lost until
      // the step the workers agree on. Asked once; answered when a server is up.
      Probe probe;
      probe.server = i;
      probe.client = std::make_unique<PsClient>(std::vector{options_.servers[static_cast<size_t>(i)]}, security_,
                                                net::kMaxPayloadBytes, options_.liveness);
      probe.status = probe.client->send(0, {.type = msg::kStatus}, zmq::message_t());
      probe_ = std::move(probe);
      break;
    }
    if (!probe_) return std::nullopt;
  }
  if (probe_->fresh) return probe_->server;
  if (!probe_->status.ready()) return std::nullopt;
  const std::string& name = options_.servers[static_cast<size_t>(probe_->server)].name;
  try {
    const net::Frame reply = probe_->status.wait(Deadline::after(std::chrono::seconds(1)), "ps-status");
    if (!decodeServerStatus(reply.bytes(), name).initialised) {
      probe_->fresh = true;
      return probe_->server;
    }
    not_replaceable_.insert(probe_->server);
    if (primaryForwards()) {
      // Async replicas: most likely the replacement the other holders feed
      // already (brought up before this chief came back).
      TANDEM_LOG_INFO("worker {}: {}'s address answers with a server already set up; nothing to bring up there",
                      options_.index, name);
    } else {
      TANDEM_LOG_WARN("worker {}: a server already set up answers at {}'s address; it is not taken back",
                      options_.index, name);
    }
  } catch (const Error& e) {
    // Up and gone again (a replacement that died too): asked again next step.
    TANDEM_LOG_DEBUG("worker {}: {}'s replacement did not answer ps-status: {}", options_.index, name, e.what());
  }
  probe_.reset();
  return std::nullopt;
}

void Worker::setUpReplacement(int server, int64_t step, const std::vector<FetchedState>& states, Deadline deadline) {
  ServerConfig config = configs_.at(static_cast<size_t>(server));
  config.start_step = static_cast<uint32_t>(step);
  const int slots = optim::slotCount(config.optimizer);
  std::vector<Ticket> tickets;
  tickets.push_back(client_->send(server, {.type = msg::kInit}, net::copyPayload(toJson(config).dump())));
  for (size_t c = 0; c < options_.layout.chunks.size(); ++c) {
    if (!options_.layout.chunks[c].heldBy(server)) continue;
    const FetchedState& state = states[c];
    // Values, then the optimizer's slots: what a resume's ps-set carries.
    const size_t floats = state.values().size() * static_cast<size_t>(slots + 1);
    tickets.push_back(client_->send(server, chunkHeader(msg::kSet, c, state.clock),
                                    net::copyPayload(state.values().data(), floats * sizeof(float))));
  }
  for (auto& t : tickets) t.wait(deadline, fmt::format("the state of its chunks after step {}", step));
}

void Worker::takeBackServer(int server, int64_t step, Deadline deadline) {
  if (server < 0 || server >= servers()) {
    throw PeerError(fmt::format("the agreement of step {} takes back server {}, but the job has {} server(s)", step,
                                server, servers()));
  }
  const std::string& name = options_.servers[static_cast<size_t>(server)].name;
  // Its old connection dropped for every worker; this one's I/O thread may
  // not have seen it yet.
  while (!client_->lost(server)) {
    if (deadline.expired()) {
      throw PeerError(fmt::format("worker {}: {} is to be taken back after step {}, but its connection here never "
                                  "dropped",
                                  options_.index, name, step));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const bool chief = options_.index == 0;
  // The chief copies the replacement's chunks from their other holders
  // first; a failure there is the job's.
  std::vector<FetchedState> states;
  if (chief) {
    const int slots = optim::slotCount(configs_.at(static_cast<size_t>(server)).optimizer);
    states = fetchState(step, slots, deadline, nullptr, [&](size_t c) { return options_.layout.chunks[c].heldBy(server); });
  }
  try {
    client_->revive(server);
    if (chief) setUpReplacement(server, step, states, deadline);
    greetRevived(server, deadline, "hello (a replacement, once the chief set it up)");
  } catch (const PeerError& e) {
    // Gone again before it was set up: its chunks go on at their other
    // holders, as before it came, and the chief asks about it again.
    if (!client_->lost(server)) throw;
    probe_.reset();  // the chief asks its address anew, not the dead one's answer again
    TANDEM_LOG_WARN("worker {}: {}'s replacement was lost before it was taken back after step {}; its chunks go on "
                    "at their other replica (--ps-replicas 2): {}",
                    options_.index, name, step, e.what());
    return;
  }
  // The rate the others were told, sent ahead of the next step's pushes.
  if (sent_lr_) {
    notice_tickets_.emplace_back(server, client_->send(server, {.type = msg::kLr},
                                                       net::copyPayload(encode(LearningRate{*sent_lr_}))));
  }
  TANDEM_LOG_WARN("worker {}: {} is back after step {}: its replacement {} (--ps-replicas 2)", options_.index, name,
                  step, chief ? "holds its chunks again, copied from the other replica" : "takes this worker's pushes");
}

bool Worker::bringUpReplacement(Deadline deadline) {
  if (!primaryForwards() || configs_.empty()) return false;
  // One that died since, or that this worker turned to, is asked about again.
  for (auto it = brought_up_.begin(); it != brought_up_.end();) {
    it = it->second->lost(0) || !client_->lost(it->first) ? brought_up_.erase(it) : std::next(it);
  }
  const std::optional<int> server = replacementWaiting();
  if (!server) return false;
  std::unique_ptr<PsClient> connection = std::move(probe_->client);
  probe_.reset();
  const ServerAddress& address = options_.servers[static_cast<size_t>(*server)];
  // It forwards nothing until a holder of its chunks dies and it takes their pushes.
  ServerConfig config = configs_.at(static_cast<size_t>(*server));
  config.forward_to.clear();
  config.forward_name.clear();
  std::map<int, std::vector<uint64_t>> keys_by_holder;
  for (const Chunk& chunk : options_.layout.chunks) {
    if (!chunk.heldBy(*server)) continue;
    for (int h : chunk.holders()) {
      if (h != *server && !client_->lost(h)) keys_by_holder[h].push_back(chunk.key);
    }
  }
  try {
    connection->send(0, {.type = msg::kInit}, net::copyPayload(toJson(config).dump()))
        .wait(deadline, "the init of a replacement");
    std::vector<std::pair<int, Ticket>> tickets;
    for (const auto& [holder, keys] : keys_by_holder) {
      const ReplicaRequest request{static_cast<uint32_t>(*server), address.endpoint, address.name, keys};
      tickets.emplace_back(holder, client_->send(holder, {.type = msg::kReplicate}, net::copyPayload(encode(request))));
    }
    for (auto& [holder, ticket] : tickets) {
      ticket.wait(deadline, fmt::format("the copy of {}'s chunks to its replacement", address.name));
      TANDEM_LOG_WARN("worker {}: {} is back: {} copies it {} chunk(s) and forwards their pushes there; the workers "
                      "turn to it if that holder dies (--ps-replicas 2)",
                      options_.index, address.name, options_.servers[static_cast<size_t>(holder)].name,
                      keys_by_holder[holder].size());
    }
  } catch (const Error& e) {
    // Gone again, or a holder died meanwhile: asked about again next step.
    TANDEM_LOG_WARN("worker {}: {}'s replacement was not brought up: {}", options_.index, address.name, e.what());
    return false;
  }
  brought_up_[*server] = std::move(connection);
  return true;
}

void Worker::greetRevived(int server, Deadline deadline, const std::string& what) {
  const net::Frame reply = sendHello(server).wait(deadline, what);
  const HelloAnswer answer = decodeHelloAnswer(reply.bytes(), options_.servers[static_cast<size_t>(server)].name);
  {
    std::lock_guard lock(window_mutex_);
    if (arena_mapped_.size() > static_cast<size_t>(server)) {
      arena_mapped_[static_cast<size_t>(server)] = arena_ != nullptr && answer.arena_mapped;
    }
  }
  std::lock_guard lock(lost_mutex_);
  std::erase(announced_lost_, server);
  rejoined_.push_back(server);
}

std::vector<int> Worker::rejoinedServers() const {
  std::lock_guard lock(lost_mutex_);
  return rejoined_;
}

}  // namespace tandem::ps
