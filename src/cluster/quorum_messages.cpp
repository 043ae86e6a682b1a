#include "cluster/quorum_messages.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "net/wire.hpp"

namespace tandem::cluster {
namespace {

// Signed fields travel as two's complement u64.
uint64_t asWire(int64_t v) { return static_cast<uint64_t>(v); }
int64_t fromWire(uint64_t v) { return static_cast<int64_t>(v); }

struct Fields {
  net::PayloadReader& reader;
  std::string_view peer;
  std::string_view what;

  [[noreturn]] void refuse(std::string_view field, const std::string& problem) const {
    throw InputError(fmt::format("frame from {}: {} {}: {}", peer, what, field, problem));
  }
  int worker(std::string_view field) const {
    const uint32_t w = reader.u32(field);
    if (w >= static_cast<uint32_t>(kMaxQuorumWorkers)) {
      refuse(field, fmt::format("worker {} is past the {} a job may have", w, kMaxQuorumWorkers));
    }
    return static_cast<int>(w);
  }
  int64_t count(std::string_view field, int64_t low) const {
    const int64_t v = fromWire(reader.u64(field));
    if (v < low) refuse(field, fmt::format("{} is below {}", v, low));
    return v;
  }
  // Ascending and unique, as Membership keeps its lists.
  std::vector<int> workers(std::string_view field) const {
    const uint32_t n = reader.u32(field);
    if (n > static_cast<uint32_t>(kMaxQuorumWorkers) || n > reader.remaining() / 4) {
      refuse(field, fmt::format("claims {} workers in {} bytes", n, reader.remaining()));
    }
    std::vector<int> out;
    out.reserve(n);
    for (uint32_t i = 0; i < n; ++i) {
      const int w = worker(field);
      if (!out.empty() && w <= out.back()) refuse(field, fmt::format("worker {} after {}: not ascending", w, out.back()));
      out.push_back(w);
    }
    return out;
  }
  std::string text(std::string_view field) const {
    const std::string_view t = reader.string(field);
    if (t.size() > kMaxQuorumText) refuse(field, fmt::format("{} bytes, more than {}", t.size(), kMaxQuorumText));
    return std::string(t);
  }
  void subset(std::string_view field, const std::vector<int>& part, const std::vector<int>& whole) const {
    if (!std::includes(whole.begin(), whole.end(), part.begin(), part.end())) {
      refuse(field, "names a worker that is not a member");
    }
  }
};

void putWorkers(net::PayloadWriter& w, const std::vector<int>& workers) {
  w.putU32(static_cast<uint32_t>(workers.size()));
  for (int id : workers) w.putU32(static_cast<uint32_t>(id));
}

}  // namespace

std::vector<char> encodeQuorumRequest(const QuorumRequest& request) {
  net::PayloadWriter w;
  w.putU32(static_cast<uint32_t>(request.worker));
  w.putU64(asWire(request.generation));
  w.putU64(asWire(request.step));
  return w.take();
}

QuorumRequest decodeQuorumRequest(std::span<const std::byte> bytes, std::string_view peer, std::string_view what) {
  net::PayloadReader reader(bytes, peer, what);
  const Fields f{reader, peer, what};
  QuorumRequest r;
  r.worker = f.worker("worker");
  r.generation = f.count("generation", 0);
  r.step = f.count("step", -1);
  reader.expectEnd();
  return r;
}

std::vector<char> encodeQuorumHosting(const QuorumHosting& hosting) {
  const QuorumOptions& o = hosting.options;
  net::PayloadWriter w;
  w.putU32(static_cast<uint32_t>(hosting.workers));
  w.putU64(asWire(hosting.first_step));
  w.putU32(static_cast<uint32_t>(o.min_workers));
  w.putU32(static_cast<uint32_t>(o.max_workers));
  for (auto d : {o.heartbeat_timeout, o.suspect_after, o.beat_interval, o.arrival_timeout}) {
    w.putU64(asWire(d.count()));
  }
  return w.take();
}

QuorumHosting decodeQuorumHosting(std::span<const std::byte> bytes, std::string_view peer) {
  constexpr std::string_view kWhat = "quorum-host payload";
  net::PayloadReader reader(bytes, peer, kWhat);
  const Fields f{reader, peer, kWhat};
  QuorumHosting h;
  h.workers = f.worker("workers");
  if (h.workers < 1) f.refuse("workers", "a job needs at least one");
  h.first_step = f.count("first step", 0);
  QuorumOptions& o = h.options;
  o.min_workers = f.worker("min workers");
  o.max_workers = f.worker("max workers");
  // A day at most: a longer wait is a mistake, not a setting.
  constexpr int64_t kMaxMs = int64_t{24} * 3600 * 1000;
  auto duration = [&](std::string_view field) {
    const int64_t ms = f.count(field, 0);
    if (ms > kMaxMs) f.refuse(field, fmt::format("{} ms is more than a day", ms));
    return std::chrono::milliseconds(ms);
  };
  o.heartbeat_timeout = duration("heartbeat timeout");
  o.suspect_after = duration("suspect after");
  o.beat_interval = duration("beat interval");
  o.arrival_timeout = duration("arrival timeout");
  reader.expectEnd();
  return h;
}

std::vector<char> encodeQuorumView(const QuorumView& view) {
  const Membership& m = view.current;
  net::PayloadWriter w;
  w.putU64(asWire(m.generation));
  w.putU64(asWire(m.step));
  w.putU64(asWire(m.source));
  putWorkers(w, m.workers);
  putWorkers(w, m.healing);
  putWorkers(w, m.joined);
  w.putU32(static_cast<uint32_t>(m.departed.size()));
  for (const auto& d : m.departed) {
    w.putU32(static_cast<uint32_t>(d.worker));
    w.putString(d.why.substr(0, kMaxQuorumText));
  }
  w.putU32(view.round_open ? 1 : 0);
  putWorkers(w, view.awaited);
  w.putU32(view.stopped ? 1 : 0);
  if (view.stopped) w.putString(view.stopped->substr(0, kMaxQuorumText));
  return w.take();
}

QuorumView decodeQuorumView(std::span<const std::byte> bytes, std::string_view peer) {
  constexpr std::string_view kWhat = "quorum-view payload";
  net::PayloadReader reader(bytes, peer, kWhat);
  const Fields f{reader, peer, kWhat};
  QuorumView view;
  Membership& m = view.current;
  m.generation = f.count("generation", 0);
  m.step = f.count("step", 0);
  const int64_t source = f.count("source", -1);
  m.workers = f.workers("workers");
  m.healing = f.workers("healing");
  m.joined = f.workers("joined");
  f.subset("healing", m.healing, m.workers);
  f.subset("joined", m.joined, m.workers);
  if (source >= 0 && !m.rankOf(static_cast<int>(std::min<int64_t>(source, kMaxQuorumWorkers)))) {
    f.refuse("source", fmt::format("worker {} is not a member", source));
  }
  if ((source >= 0) == m.healing.empty()) f.refuse("source", "a source exactly when some member is healing");
  m.source = static_cast<int>(source);
  const uint32_t departed = reader.u32("departed");
  if (departed > static_cast<uint32_t>(kMaxQuorumWorkers) || departed > reader.remaining() / 8) {
    f.refuse("departed", fmt::format("claims {} workers in {} bytes", departed, reader.remaining()));
  }
  for (uint32_t i = 0; i < departed; ++i) {
    Departure d;
    d.worker = f.worker("departed");
    // A member may have departed only as a process that restarted into its place.
    if (m.rankOf(d.worker) && !std::binary_search(m.joined.begin(), m.joined.end(), d.worker)) {
      f.refuse("departed", fmt::format("worker {} is still a member and did not join again", d.worker));
    }
    d.why = f.text("departure reason");
    m.departed.push_back(std::move(d));
  }
  const uint32_t open = reader.u32("round open");
  if (open > 1) f.refuse("round open", fmt::format("{} is not 0 or 1", open));
  view.round_open = open == 1;
  view.awaited = f.workers("awaited");
  f.subset("awaited", view.awaited, m.workers);
  const uint32_t stopped = reader.u32("stopped");
  if (stopped > 1) f.refuse("stopped", fmt::format("{} is not 0 or 1", stopped));
  if (stopped == 1) view.stopped = f.text("stop reason");
  reader.expectEnd();
  return view;
}

}  // namespace tandem::cluster
