#include "ps/client.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <fmt/format.h>

#include <map>

#include "core/error.hpp"
#include "core/logging.hpp"
#include "net/request_client.hpp"

namespace tandem::ps {

net::Frame Ticket::wait(Deadline deadline, const std::string& what) {
  TANDEM_ENFORCE(state_ != nullptr, "waiting on an empty ticket");
  const auto started = Clock::now();
  std::unique_lock lock(state_->mutex);
  if (!state_->cv.wait_until(lock, deadline.at(), [&] { return state_->done; })) {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
    throw PeerError(fmt::format("{} did not answer {} (waited {})", state_->server, what, net::formatDuration(waited)));
  }
  if (!state_->failure.empty()) throw PeerError(fmt::format("{}: {}", state_->server, state_->failure));
  net::Frame frame = std::move(*state_->reply);
  state_->reply.reset();
  if (frame.header.type == net::MessageType::kError) {
    throw Error(fmt::format("{} refused {}: {}", state_->server, what, frame.text()));
  }
  return frame;
}

PsClient::PsClient(std::vector<ServerAddress> servers, uint64_t max_payload_bytes)
    : servers_(std::move(servers)), max_payload_bytes_(max_payload_bytes) {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) throw Error("ps client: eventfd failed");
  io_ = std::thread([this] { ioLoop(); });
}

PsClient::~PsClient() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof(one));
  io_.join();
  ::close(wake_fd_);
}

Ticket PsClient::send(int server, net::FrameHeader header, zmq::message_t payload) {
  TANDEM_ENFORCE(server >= 0 && server < servers(), "no such parameter server");
  Ticket ticket;
  ticket.state_ = std::make_shared<Ticket::State>();
  ticket.state_->server = servers_[static_cast<size_t>(server)].name;
  {
    std::lock_guard lock(mutex_);
    queue_.push_back({server, header, std::move(payload), ticket.state_});
  }
  uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof(one));
  return ticket;
}

namespace {

void complete(const std::shared_ptr<Ticket::State>& t, std::optional<net::Frame> reply, std::string failure) {
  {
    std::lock_guard lock(t->mutex);
    t->reply = std::move(reply);
    t->failure = std::move(failure);
    t->done = true;
  }
  t->cv.notify_all();
}

}  // namespace

void PsClient::ioLoop() {
  zmq::context_t context(1);
  std::vector<zmq::socket_t> sockets;
  for (const auto& s : servers_) {
    sockets.emplace_back(context, zmq::socket_type::dealer);
    net::configureSocket(sockets.back(), max_payload_bytes_, net::isIpv6(s.endpoint));
    // Pipelined chunks must never be dropped or block the loop.
    sockets.back().set(zmq::sockopt::sndhwm, 0);
    sockets.back().set(zmq::sockopt::rcvhwm, 0);
    sockets.back().connect(s.endpoint);
  }
  std::vector<std::map<uint64_t, std::shared_ptr<Ticket::State>>> in_flight(servers_.size());
  uint64_t next_id = 1;
  std::vector<zmq_pollitem_t> items;
  items.push_back({nullptr, wake_fd_, ZMQ_POLLIN, 0});
  for (auto& s : sockets) items.push_back({s.handle(), 0, ZMQ_POLLIN, 0});
  std::vector<zmq::message_t> parts;
  std::vector<Outgoing> batch;
  while (true) {
    if (!net::pollItems(items, std::chrono::milliseconds(-1))) continue;
    if (items[0].revents & ZMQ_POLLIN) {
      uint64_t count = 0;
      [[maybe_unused]] auto n = ::read(wake_fd_, &count, sizeof(count));
      bool stop = false;
      {
        std::lock_guard lock(mutex_);
        batch.swap(queue_);
        stop = stopping_;
      }
      for (auto& out : batch) {
        out.header.request_id = next_id++;
        in_flight[static_cast<size_t>(out.server)][out.header.request_id] = out.ticket;
        net::sendFrame(sockets[static_cast<size_t>(out.server)], out.header, std::move(out.payload));
      }
      batch.clear();
      if (stop) break;
    }
    for (size_t s = 0; s < sockets.size(); ++s) {
      if (!(items[s + 1].revents & ZMQ_POLLIN)) continue;
      while (size_t total = net::receiveParts(sockets[s], parts, 2)) {
        auto& pending = in_flight[s];
        try {
          net::Frame frame = net::decodeFrame(parts, total, max_payload_bytes_, servers_[s].name);
          auto it = pending.find(frame.header.request_id);
          if (it == pending.end()) {
            TANDEM_LOG_WARN("{} answered unknown request {}; ignored", servers_[s].name, frame.header.request_id);
            continue;
          }
          complete(it->second, std::move(frame), "");
          pending.erase(it);
        } catch (const InputError& e) {
          // A malformed reply cannot be matched to its request: fail them all.
          for (auto& [id, ticket] : pending) complete(ticket, std::nullopt, e.what());
          pending.clear();
        }
      }
    }
  }
}

}  // namespace tandem::ps
