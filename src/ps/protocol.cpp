#include "ps/messages.hpp"
#include "ps/protocol.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "core/patient_wait.hpp"
#include "ps/message_fields.hpp"

namespace tandem::ps {
namespace {

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
          {"staleness_lr", c.staleness_lr},
          {"momentum_correction", c.momentum_correction},
          {"replicas", c.replicas},
          {"backup_chunks", c.backup_chunks},
          {"forward_to", c.forward_to},
          {"forward_name", c.forward_name}};
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
  if (j.is_object() && j.contains("momentum_correction")) {
    c.momentum_correction = field<bool>(j, "momentum_correction", peer);
    if (c.momentum_correction && !c.staleness_lr) {
      throw InputError(fmt::format("{}: ps-init: momentum_correction needs staleness_lr (its measured staleness)",
                                   peer));
    }
    if (c.momentum_correction && c.delay_compensation > 0) {
      throw InputError(fmt::format("{}: ps-init: momentum_correction and delay_compensation together", peer));
    }
  }
  if (j.is_object() && j.contains("replicas")) {
    c.replicas = field<int>(j, "replicas", peer);
    if (c.replicas < 1 || c.replicas > 2) {
      throw InputError(fmt::format("{}: ps-init: replicas {} is not 1 or 2", peer, c.replicas));
    }
    if (c.replicas > 1 && c.delay_compensation > 0) {
      throw InputError(fmt::format("{}: ps-init: replicas with delay compensation are not built", peer));
    }
  }
  if (j.is_object() && j.contains("backup_chunks")) {
    c.backup_chunks = field<std::vector<uint64_t>>(j, "backup_chunks", peer);
    if (!c.backup_chunks.empty() && c.replicas < 2) {
      throw InputError(fmt::format("{}: ps-init: backup_chunks need replicas 2", peer));
    }
  }
  if (j.is_object() && j.contains("forward_to")) {
    c.forward_to = field<std::string>(j, "forward_to", peer);
    c.forward_name = field<std::string>(j, "forward_name", peer);
    if (!c.forward_to.empty() && (c.replicas < 2 || c.mode == Mode::PsSync)) {
      throw InputError(fmt::format("{}: ps-init: forward_to needs replicas 2 in async or bounded-staleness mode", peer));
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

// --- binary payloads: one layout per message, read and written alike -------

namespace fields {

// A step's yes/no answers share one word.
constexpr Bit kStopBit{1}, kCheckpointBit{2};

template <>
struct Layout<Hello> {
  static constexpr std::string_view what = "ps-hello payload";
  template <class F, class M>
  static void fields(F& f, M& h) {
    f.u32("worker", h.worker);
    f.u64("layout fingerprint", h.layout_fingerprint);
    f.u64("generation", h.generation);
    f.u32("sync join step", h.sync_join);
    f.optionalTail(h.arena, [](auto& f, auto& arena) {  // a same-host worker's shared memory
      f.u32("shared-memory pid", arena.pid);
      f.i32("shared-memory fd", arena.fd);
      f.u64("shared-memory size", arena.bytes);
      f.tailBytes("shared-memory token", arena.token);
    });
  }
};

template <>
struct Layout<HelloAnswer> {
  static constexpr std::string_view what = "hello answer";
  template <class F, class M>
  static void fields(F& f, M& a) {
    f.u32("clock", a.clock);
    f.u32("start step", a.start_step);
    f.flag("shared memory", "shared-memory flag", a.arena_mapped);
    f.flag("fed", "fed flag", a.fed);
    f.flag("finished", "finished flag", a.finished);
  }
};

template <>
struct Layout<SnapshotPoint> {
  static constexpr std::string_view what = "snapshot point";
  // `workers`: the clocks a decoded point must hold (0: any number).
  template <class F, class M>
  static void fields(F& f, M& p, size_t workers = 0) {
    f.u64("global step", p.global_step);
    f.u32s("worker count", "clock", p.clocks, [&](uint32_t count, std::string_view peer) {
      if (workers != 0 && count != workers) {
        throw InputError(fmt::format("{}: snapshot point: {} clocks for {} worker(s)", peer, count, workers));
      }
    });
  }
};

template <>
struct Layout<LearningRate> {
  static constexpr std::string_view what = "ps-lr payload";
  template <class F, class M>
  static void fields(F& f, M& r) {
    f.f64("learning rate", r.lr);
  }
};

template <>
struct Layout<StepReport> {
  static constexpr std::string_view what = "ps-clock payload";
  template <class F, class M>
  static void fields(F& f, M& s) {
    f.f64("loss", s.loss);
    f.f64("compute seconds", s.compute_seconds);
    f.bits("flags", kStopBit, s.stop, kCheckpointBit, s.checkpoint);
    f.u32("rejoining server", s.rejoining_server);
  }
};

template <>
struct Layout<StepAgreement> {
  static constexpr std::string_view what = "ps-clock reply";
  template <class F, class M>
  static void fields(F& f, M& a) {
    f.f64("loss", a.loss);
    f.f64("slowest compute seconds", a.slowest_compute_seconds);
    f.bits("flags", kStopBit, a.stop, kCheckpointBit, a.checkpoint);
    f.u32("slowest clock", a.slowest_clock);
    f.u64("global step", a.global_step);
    f.truthy("finished", a.finished);
    f.u32("rejoining server", a.rejoining_server);
  }
};

template <>
struct Layout<ServerStatus> {
  static constexpr std::string_view what = "ps-status reply";
  template <class F, class M>
  static void fields(F& f, M& s) {
    f.flag("initialised", "initialised flag", s.initialised);
    f.flag("ready", "ready flag", s.ready);
  }
};

template <>
struct Layout<ForwardHead> {
  static constexpr std::string_view what = "ps-forward head";
  template <class F, class M>
  static void fields(F& f, M& h) {
    f.u32("worker", h.worker);
    f.u32("clock", h.clock);
    f.u64("update", h.update);
    f.f64("learning rate", h.lr);
    f.u64("staleness", h.staleness);
    f.f64("mean staleness", h.mean_staleness);
  }
};

}  // namespace fields

std::vector<char> encodeForward(const ForwardHead& head, std::span<const std::byte> grad) {
  std::vector<char> bytes = fields::encodeMessage(head);
  bytes.insert(bytes.end(), reinterpret_cast<const char*>(grad.data()),
               reinterpret_cast<const char*>(grad.data()) + grad.size());
  return bytes;
}

ForwardHead decodeForward(std::span<const std::byte> bytes, std::string_view peer, std::span<const std::byte>& grad) {
  if (bytes.size() < kForwardHeadBytes) {
    throw InputError(fmt::format("frame from {}: ps-forward payload of {} bytes is shorter than its {}-byte head", peer,
                                 bytes.size(), kForwardHeadBytes));
  }
  const ForwardHead head = fields::decodeMessage<ForwardHead>(bytes.first(kForwardHeadBytes), peer);
  if (!std::isfinite(head.lr) || head.lr < 0) {
    throw InputError(fmt::format("frame from {}: ps-forward: learning rate {} is not a finite non-negative number",
                                 peer, head.lr));
  }
  if (!std::isfinite(head.mean_staleness) || head.mean_staleness < 0) {
    throw InputError(fmt::format("frame from {}: ps-forward: mean staleness {} is not a finite non-negative number",
                                 peer, head.mean_staleness));
  }
  grad = bytes.subspan(kForwardHeadBytes);
  return head;
}

std::vector<char> encode(const Hello& hello) { return fields::encodeMessage(hello); }
Hello decodeHello(std::span<const std::byte> bytes, std::string_view peer) {
  return fields::decodeMessage<Hello>(bytes, peer);
}

std::vector<char> encode(const HelloAnswer& answer) { return fields::encodeMessage(answer); }
HelloAnswer decodeHelloAnswer(std::span<const std::byte> bytes, std::string_view peer) {
  HelloAnswer a = fields::decodeMessage<HelloAnswer>(bytes, peer);
  if (a.clock < a.start_step) {
    throw InputError(fmt::format("{}: hello answer: clock {} is before the start step {}", peer, a.clock, a.start_step));
  }
  return a;
}

namespace {

nlohmann::json parseJson(std::span<const std::byte> bytes, std::string_view peer, std::string_view what) {
  try {
    return nlohmann::json::parse(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: {} is not JSON: {}", peer, what, e.what()));
  }
}

template <class T>
T jsonField(const nlohmann::json& j, const char* name, std::string_view peer, std::string_view what) {
  if (!j.is_object() || !j.contains(name)) throw InputError(fmt::format("{}: {}: missing field '{}'", peer, what, name));
  try {
    return j.at(name).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw InputError(fmt::format("{}: {}: field '{}' has the wrong type ({})", peer, what, name, j.at(name).dump()));
  }
}

std::vector<char> jsonBytes(const nlohmann::json& j) {
  const std::string text = j.dump();
  return {text.begin(), text.end()};
}

}  // namespace

std::vector<char> encode(const ReplicaRequest& r) {
  return jsonBytes({{"server", r.server}, {"endpoint", r.endpoint}, {"name", r.name}, {"keys", r.keys}});
}

ReplicaRequest decodeReplicaRequest(std::span<const std::byte> bytes, std::string_view peer) {
  constexpr std::string_view what = "ps-replicate";
  const nlohmann::json j = parseJson(bytes, peer, what);
  ReplicaRequest r;
  r.server = jsonField<uint32_t>(j, "server", peer, what);
  r.endpoint = jsonField<std::string>(j, "endpoint", peer, what);
  r.name = jsonField<std::string>(j, "name", peer, what);
  r.keys = jsonField<std::vector<uint64_t>>(j, "keys", peer, what);
  if (r.endpoint.empty() || r.keys.empty()) {
    throw InputError(fmt::format("{}: {}: an endpoint and at least one chunk key are needed", peer, what));
  }
  return r;
}

std::vector<char> encodeCopy(const CopyHead& head, std::span<const std::byte> state) {
  const std::vector<char> text = jsonBytes(
      {{"applied", head.applied}, {"pushed_through", head.pushed_through}, {"pulled_at", head.pulled_at}});
  // [u32 head bytes][head, padded to 8 bytes][state]: the floats stay aligned.
  const size_t padded = (text.size() + 4 + 7) / 8 * 8;
  std::vector<char> bytes(padded, ' ');
  const auto size = static_cast<uint32_t>(padded - 4);
  std::memcpy(bytes.data(), &size, 4);
  std::memcpy(bytes.data() + 4, text.data(), text.size());
  bytes.insert(bytes.end(), reinterpret_cast<const char*>(state.data()),
               reinterpret_cast<const char*>(state.data()) + state.size());
  return bytes;
}

CopyHead decodeCopy(std::span<const std::byte> bytes, size_t workers, std::string_view peer,
                    std::span<const std::byte>& state) {
  constexpr std::string_view what = "ps-copy head";
  uint32_t size = 0;
  if (bytes.size() >= 4) std::memcpy(&size, bytes.data(), 4);
  if (bytes.size() < 4 || bytes.size() - 4 < size) {
    throw InputError(fmt::format("{}: {} of {} bytes does not fit the {}-byte payload", peer, what, size,
                                 bytes.size()));
  }
  const nlohmann::json j = parseJson(bytes.subspan(4, size), peer, what);
  CopyHead head;
  head.applied = jsonField<uint64_t>(j, "applied", peer, what);
  head.pushed_through = jsonField<std::vector<uint32_t>>(j, "pushed_through", peer, what);
  head.pulled_at = jsonField<std::vector<uint64_t>>(j, "pulled_at", peer, what);
  if (head.pushed_through.size() != workers || (!head.pulled_at.empty() && head.pulled_at.size() != workers)) {
    throw InputError(fmt::format("{}: {} lists {} and {} workers' entries for {} worker(s)", peer, what,
                                 head.pushed_through.size(), head.pulled_at.size(), workers));
  }
  state = bytes.subspan(4 + size);
  return head;
}

std::vector<char> encode(const WorkerMirror& m) {
  nlohmann::json lr = nlohmann::json::array();
  for (double x : m.lr) lr.push_back(std::isnan(x) ? nlohmann::json(nullptr) : nlohmann::json(x));
  return jsonBytes({{"clocks", m.clocks}, {"done", m.done}, {"lost", m.lost}, {"holds_grant", m.holds_grant},
                    {"granted", m.granted}, {"reported", m.reported}, {"max_staleness", m.max_staleness},
                    {"has_clocks", m.has_clocks}, {"lr", lr}});
}

WorkerMirror decodeWorkerMirror(std::span<const std::byte> bytes, size_t workers, std::string_view peer) {
  constexpr std::string_view what = "ps-mirror";
  const nlohmann::json j = parseJson(bytes, peer, what);
  WorkerMirror m;
  m.clocks = jsonField<std::vector<uint32_t>>(j, "clocks", peer, what);
  m.done = jsonField<std::vector<bool>>(j, "done", peer, what);
  m.lost = jsonField<std::vector<bool>>(j, "lost", peer, what);
  m.holds_grant = jsonField<std::vector<bool>>(j, "holds_grant", peer, what);
  m.granted = jsonField<uint64_t>(j, "granted", peer, what);
  m.reported = jsonField<uint64_t>(j, "reported", peer, what);
  m.max_staleness = jsonField<uint32_t>(j, "max_staleness", peer, what);
  m.has_clocks = jsonField<bool>(j, "has_clocks", peer, what);
  const auto lr = jsonField<nlohmann::json>(j, "lr", peer, what);
  if (!lr.is_array()) throw InputError(fmt::format("{}: {}: lr is not a list", peer, what));
  for (const auto& x : lr) {
    if (!x.is_null() && !(x.is_number() && std::isfinite(x.get<double>()) && x.get<double>() >= 0)) {
      throw InputError(fmt::format("{}: {}: rate {} is not a finite non-negative number", peer, what, x.dump()));
    }
    m.lr.push_back(x.is_null() ? std::nan("") : x.get<double>());
  }
  const size_t n = workers;
  if (m.lr.size() != n || (m.has_clocks && (m.clocks.size() != n || m.done.size() != n || m.lost.size() != n ||
                                             m.holds_grant.size() != n))) {
    throw InputError(fmt::format("{}: {} does not list {} worker(s)", peer, what, n));
  }
  return m;
}

std::vector<char> encode(const ServerStatus& status) { return fields::encodeMessage(status); }
ServerStatus decodeServerStatus(std::span<const std::byte> bytes, std::string_view peer) {
  return fields::decodeMessage<ServerStatus>(bytes, peer);
}

std::vector<char> encode(const SnapshotPoint& point) { return fields::encodeMessage(point); }
SnapshotPoint decodeSnapshotPoint(std::span<const std::byte> bytes, size_t workers, std::string_view peer) {
  return fields::decodeMessage<SnapshotPoint>(bytes, peer, workers);
}

std::vector<char> encode(const StepReport& report) { return fields::encodeMessage(report); }
StepReport decodeStepReport(std::span<const std::byte> bytes, std::string_view peer) {
  return fields::decodeMessage<StepReport>(bytes, peer);
}

std::vector<char> encode(const StepAgreement& agreement) { return fields::encodeMessage(agreement); }
StepAgreement decodeStepAgreement(std::span<const std::byte> bytes, std::string_view peer) {
  return fields::decodeMessage<StepAgreement>(bytes, peer);
}

std::vector<char> encode(const LearningRate& rate) { return fields::encodeMessage(rate); }
LearningRate decodeLearningRate(std::span<const std::byte> bytes, std::string_view peer) {
  const LearningRate rate = fields::decodeMessage<LearningRate>(bytes, peer);
  if (!std::isfinite(rate.lr) || rate.lr < 0) {
    throw InputError(fmt::format("frame from {}: ps-lr payload: learning rate {} is not a finite non-negative number",
                                 peer, rate.lr));
  }
  return rate;
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
