#include "ps/messages.hpp"
#include "ps/protocol.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "core/patient_wait.hpp"
#include "net/wire.hpp"

namespace tandem::ps {
namespace {

uint64_t bitsOf(double v) { return std::bit_cast<uint64_t>(v); }
double doubleOf(uint64_t bits) { return std::bit_cast<double>(bits); }

template <class T>
T field(const nlohmann::json& j, const char* name, std::string_view peer) {
  if (!j.is_object() || !j.contains(name)) {
    throw InputError(fmt::format("{}: ps-init: missing field '{}'", peer, name));
  }
  try {
    return j.at(name).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw InputError(fmt::format("{}: ps-init: field '{}' has the wrong type ({})", peer, name, j.at(name).dump()));
  }
}

}  // namespace

std::string ServerConfig::peerTimeoutText() const {
  return formatDuration(std::chrono::milliseconds(static_cast<int64_t>(peer_timeout_s * 1000)));
}

double ServerConfig::lrAt(uint64_t step) const {
  if (lr_by_step.empty()) return 0;
  return lr_by_step[std::min<uint64_t>(step, lr_by_step.size() - 1)];
}

nlohmann::json toJson(const ServerConfig& c) {
  nlohmann::json chunks = nlohmann::json::array();
  for (const auto& r : c.chunks) chunks.push_back({r.key, r.length});
  const auto& o = c.optimizer;
  return {{"mode", std::string(modeName(c.mode))},
          {"staleness", c.staleness},
          {"workers", c.workers},
          {"optimizer",
           {{"name", o.name}, {"momentum", o.momentum}, {"nesterov", o.nesterov}, {"weight_decay", o.weight_decay},
            {"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps}, {"alpha", o.alpha}, {"centered", o.centered}}},
          {"lr_by_step", c.lr_by_step},
          {"layout_fingerprint", c.layout_fingerprint},
          {"chunks", chunks},
          {"peer_timeout_s", c.peer_timeout_s},
          {"start_step", c.start_step},
          {"total_steps", c.total_steps},
          {"wire_dtype", wireDtypeName(c.wire)},
          {"push_bits", c.push_bits},
          {"push_groups", c.push_groups},
          {"generation", c.generation},
          {"replaces", c.replaces},
          {"delay_compensation", c.delay_compensation},
          {"delay_compensation_form", c.delay_form},
          {"staleness_lr", c.staleness_lr}};
}

ServerConfig serverConfigFromJson(const nlohmann::json& j, std::string_view peer) {
  ServerConfig c;
  c.mode = parseServerMode(field<std::string>(j, "mode", peer), fmt::format("{}: ps-init", peer));
  c.staleness = field<int>(j, "staleness", peer);
  c.workers = field<int>(j, "workers", peer);
  if (c.workers < 1 || c.staleness < 0) {
    throw InputError(fmt::format("{}: ps-init: workers {} / staleness {} out of range", peer, c.workers, c.staleness));
  }
  const auto o = field<nlohmann::json>(j, "optimizer", peer);
  c.optimizer.name = field<std::string>(o, "name", peer);
  if (!optim::knownOptimizer(c.optimizer.name)) {
    throw InputError(fmt::format("{}: ps-init: unknown optimizer '{}'", peer, c.optimizer.name));
  }
  c.optimizer.momentum = field<double>(o, "momentum", peer);
  c.optimizer.nesterov = field<bool>(o, "nesterov", peer);
  c.optimizer.weight_decay = field<double>(o, "weight_decay", peer);
  c.optimizer.beta1 = field<double>(o, "beta1", peer);
  c.optimizer.beta2 = field<double>(o, "beta2", peer);
  c.optimizer.eps = field<double>(o, "eps", peer);
  c.optimizer.alpha = field<double>(o, "alpha", peer);
  c.optimizer.centered = field<bool>(o, "centered", peer);
  c.lr_by_step = field<std::vector<double>>(j, "lr_by_step", peer);
  if (c.lr_by_step.empty()) throw InputError(fmt::format("{}: ps-init: lr_by_step is empty", peer));
  c.layout_fingerprint = field<uint64_t>(j, "layout_fingerprint", peer);
  for (const auto& item : field<nlohmann::json>(j, "chunks", peer)) {
    if (!item.is_array() || item.size() != 2 || !item[0].is_number_unsigned() || !item[1].is_number_integer() ||
        item[1].get<int64_t>() <= 0) {
      throw InputError(fmt::format("{}: ps-init: chunk entry {} is not [key, positive length]", peer, item.dump()));
    }
    c.chunks.push_back({item[0].get<uint64_t>(), item[1].get<int64_t>()});
  }
  c.peer_timeout_s = field<double>(j, "peer_timeout_s", peer);
  if (!(c.peer_timeout_s > 0)) throw InputError(fmt::format("{}: ps-init: peer_timeout_s must be > 0", peer));
  c.start_step = field<uint32_t>(j, "start_step", peer);
  c.total_steps = field<uint64_t>(j, "total_steps", peer);
  // Optional: a chief from before the field sends float32.
  if (j.is_object() && j.contains("wire_dtype")) {
    c.wire = parseWireDtype(field<std::string>(j, "wire_dtype", peer), fmt::format("{}: ps-init: wire_dtype", peer));
  }
  if (j.is_object() && j.contains("push_bits")) {
    c.push_bits = checkPushBits(field<int>(j, "push_bits", peer), fmt::format("{}: ps-init: push_bits", peer));
  }
  if (j.is_object() && j.contains("generation")) c.generation = field<uint64_t>(j, "generation", peer);
  if (j.is_object() && j.contains("replaces")) c.replaces = field<uint64_t>(j, "replaces", peer);
  if (j.is_object() && j.contains("delay_compensation")) {
    c.delay_compensation = field<double>(j, "delay_compensation", peer);
    if (!(c.delay_compensation >= 0 && c.delay_compensation <= 1e6)) {
      throw InputError(fmt::format("{}: ps-init: delay_compensation {} is not in [0, 1e6]", peer,
                                   c.delay_compensation));
    }
    if (c.delay_compensation > 0 && c.mode == Mode::PsSync) {
      throw InputError(fmt::format("{}: ps-init: delay_compensation needs async or bounded-staleness mode", peer));
    }
  }
  if (j.is_object() && j.contains("delay_compensation_form")) {
    c.delay_form = parseEnum(kDelayFormNames, field<std::string>(j, "delay_compensation_form", peer),
                             fmt::format("{}: ps-init: delay_compensation_form", peer));
  }
  if (j.is_object() && j.contains("staleness_lr")) {
    c.staleness_lr = field<bool>(j, "staleness_lr", peer);
    if (c.staleness_lr && c.mode == Mode::PsSync) {
      throw InputError(fmt::format("{}: ps-init: staleness_lr needs async or bounded-staleness mode", peer));
    }
  }
  if (j.is_object() && j.contains("push_groups")) {
    c.push_groups = field<std::vector<std::vector<int>>>(j, "push_groups", peer);
    if (!c.push_groups.empty()) {
      if (c.mode != Mode::PsSync) throw InputError(fmt::format("{}: ps-init: push_groups need sync mode", peer));
      // Bounded before allocating: groups list workers once each.
      if (c.workers > (1 << 16)) throw InputError(fmt::format("{}: ps-init: {} workers is too many", peer, c.workers));
      std::vector<int> seen(static_cast<size_t>(c.workers), 0);
      for (const auto& group : c.push_groups) {
        if (group.empty()) throw InputError(fmt::format("{}: ps-init: push_groups has an empty group", peer));
        for (int w : group) {
          if (w < 0 || w >= c.workers || seen[static_cast<size_t>(w)]++ > 0) {
            throw InputError(fmt::format("{}: ps-init: push_groups must hold each of the {} workers once; {} is "
                                         "out of range or repeated", peer, c.workers, w));
          }
        }
      }
      if (std::find(seen.begin(), seen.end(), 0) != seen.end()) {
        throw InputError(fmt::format("{}: ps-init: push_groups leave a worker out", peer));
      }
    }
  }
  return c;
}

std::vector<int> pushersOf(const ServerConfig& config, uint64_t key) {
  std::vector<int> pushers;
  if (config.push_groups.empty()) {
    for (int w = 0; w < config.workers; ++w) pushers.push_back(w);
    return pushers;
  }
  for (const auto& group : config.push_groups) pushers.push_back(group[pusherRank(key, group.size())]);
  std::sort(pushers.begin(), pushers.end());
  return pushers;
}

std::vector<char> encode(const Hello& hello) {
  net::PayloadWriter w;
  w.putU32(hello.worker);
  w.putU64(hello.layout_fingerprint);
  w.putU64(hello.generation);
  if (hello.arena) {
    w.putU32(hello.arena->pid);
    w.putU32(static_cast<uint32_t>(hello.arena->fd));
    w.putU64(hello.arena->bytes);
    w.putRaw(hello.arena->token.data(), hello.arena->token.size());
  }
  return w.take();
}

std::vector<char> encode(const SnapshotPoint& point) {
  net::PayloadWriter w;
  w.putU64(point.global_step);
  w.putU32(static_cast<uint32_t>(point.clocks.size()));
  for (uint32_t clock : point.clocks) w.putU32(clock);
  return w.take();
}

SnapshotPoint decodeSnapshotPoint(std::span<const std::byte> bytes, size_t workers, std::string_view peer) {
  net::PayloadReader r(bytes, peer, "snapshot point");
  SnapshotPoint point;
  point.global_step = r.u64("global step");
  const uint32_t count = r.u32("worker count");
  if (workers != 0 && count != workers) {
    throw InputError(fmt::format("{}: snapshot point: {} clocks for {} worker(s)", peer, count, workers));
  }
  for (uint32_t i = 0; i < count; ++i) point.clocks.push_back(r.u32("clock"));
  r.expectEnd();
  return point;
}

std::vector<char> encode(const HelloAnswer& answer) {
  net::PayloadWriter w;
  w.putU32(answer.clock);
  w.putU32(answer.start_step);
  w.putU32(answer.arena_mapped ? 1 : 0);
  return w.take();
}

HelloAnswer decodeHelloAnswer(std::span<const std::byte> bytes, std::string_view peer) {
  net::PayloadReader r(bytes, peer, "hello answer");
  HelloAnswer a;
  a.clock = r.u32("clock");
  a.start_step = r.u32("start step");
  const uint32_t mapped = r.u32("shared memory");
  if (mapped > 1) throw InputError(fmt::format("{}: hello answer: shared-memory flag {} is neither 0 nor 1", peer, mapped));
  a.arena_mapped = mapped == 1;
  r.expectEnd();
  if (a.clock < a.start_step) {
    throw InputError(fmt::format("{}: hello answer: clock {} is before the start step {}", peer, a.clock, a.start_step));
  }
  return a;
}

Hello decodeHello(std::span<const std::byte> bytes, std::string_view peer) {
  net::PayloadReader r(bytes, peer, "ps-hello payload");
  Hello h;
  h.worker = r.u32("worker");
  h.layout_fingerprint = r.u64("layout fingerprint");
  h.generation = r.u64("generation");
  if (r.remaining() > 0) {
    net::ArenaHandle arena;
    arena.pid = r.u32("shared-memory pid");
    arena.fd = static_cast<int32_t>(r.u32("shared-memory fd"));
    arena.bytes = r.u64("shared-memory size");
    const auto token = r.rest();
    if (token.size() != arena.token.size()) {
      throw InputError(fmt::format("{}: ps-hello payload: shared-memory token of {} bytes, expected {}", peer,
                                   token.size(), arena.token.size()));
    }
    std::memcpy(arena.token.data(), token.data(), token.size());
    h.arena = arena;
  }
  r.expectEnd();
  return h;
}

ServerConfig decodeServerInit(std::string_view text, uint64_t max_payload_bytes, std::string_view peer) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("ps-init payload is not valid JSON: {}", e.what()));
  }
  ServerConfig c = serverConfigFromJson(j, peer);
  constexpr int kMaxWorkers = 1 << 16;
  if (c.workers > kMaxWorkers) throw InputError(fmt::format("ps-init: {} workers exceeds {}", c.workers, kMaxWorkers));
  for (const auto& r : c.chunks) {
    if (static_cast<uint64_t>(r.length) * sizeof(float) > max_payload_bytes) {
      throw InputError(fmt::format("ps-init: chunk {} of {} floats exceeds the {} frame limit", r.key, r.length,
                                   net::formatBytes(max_payload_bytes)));
    }
  }
  return c;
}

namespace {
// A step's yes/no answers share one word.
constexpr uint32_t kStopBit = 1, kCheckpointBit = 2;
uint32_t flagBits(bool stop, bool checkpoint) { return (stop ? kStopBit : 0) | (checkpoint ? kCheckpointBit : 0); }
}  // namespace

std::vector<char> encode(const StepReport& report) {
  net::PayloadWriter w;
  w.putU64(bitsOf(report.loss));
  w.putU64(bitsOf(report.compute_seconds));
  w.putU32(flagBits(report.stop, report.checkpoint));
  return w.take();
}

StepReport decodeStepReport(std::span<const std::byte> bytes, std::string_view peer) {
  net::PayloadReader r(bytes, peer, "ps-clock payload");
  StepReport s;
  s.loss = doubleOf(r.u64("loss"));
  s.compute_seconds = doubleOf(r.u64("compute seconds"));
  const uint32_t flags = r.u32("flags");
  s.stop = (flags & kStopBit) != 0;
  s.checkpoint = (flags & kCheckpointBit) != 0;
  r.expectEnd();
  return s;
}

std::vector<char> encode(const StepAgreement& a) {
  net::PayloadWriter w;
  w.putU64(bitsOf(a.loss));
  w.putU64(bitsOf(a.slowest_compute_seconds));
  w.putU32(flagBits(a.stop, a.checkpoint));
  w.putU32(a.slowest_clock);
  w.putU64(a.global_step);
  w.putU32(a.finished ? 1 : 0);
  return w.take();
}

StepAgreement decodeStepAgreement(std::span<const std::byte> bytes, std::string_view peer) {
  net::PayloadReader r(bytes, peer, "ps-clock reply");
  StepAgreement a;
  a.loss = doubleOf(r.u64("loss"));
  a.slowest_compute_seconds = doubleOf(r.u64("slowest compute seconds"));
  const uint32_t flags = r.u32("flags");
  a.stop = (flags & kStopBit) != 0;
  a.checkpoint = (flags & kCheckpointBit) != 0;
  a.slowest_clock = r.u32("slowest clock");
  a.global_step = r.u64("global step");
  a.finished = r.u32("finished") != 0;
  r.expectEnd();
  return a;
}

net::MessageType replyTypeOf(net::MessageType request) {
  switch (net::code(request)) {
    case net::code(msg::kPull):
    case net::code(msg::kState): return msg::kValues;
    case net::code(msg::kClock):
    case net::code(msg::kAwaitWorkers): return msg::kAgreement;
    default: return net::MessageType::kOk;
  }
}

}  // namespace tandem::ps
