#include "cluster/membership.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>
#include <thread>

#include "core/error.hpp"
#include "core/stop_request.hpp"
#include "net/request_client.hpp"

namespace tandem::cluster {
namespace {

constexpr std::chrono::milliseconds kFirstPoll{5};
constexpr std::chrono::milliseconds kMaxPoll{50};
// As in the store client: a late task is reported as missing rather than
// the coordinator as silent.
constexpr std::chrono::milliseconds kCheckRoundTrip{100};
// How long the chief keeps the store up, after a fingerprint mismatch, for
// the others to compare: a few of their round trips.
constexpr std::chrono::milliseconds kComparedGrace{3000};
// Fingerprint values can be long (shape lists); errors show a prefix.
constexpr size_t kMaxShownValue = 80;

struct Task {
  Role role;
  int index;
  std::string name;
  std::string key;
};

std::string roleKey(Role role) { return role == Role::kWorker ? "worker" : "ps"; }

std::string joinNames(const std::vector<const Task*>& tasks) {
  std::string out;
  for (const Task* t : tasks) {
    if (!out.empty()) out += ", ";
    out += t->name;
  }
  return out.empty() ? "none" : out;
}

std::string show(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > kMaxShownValue) text = text.substr(0, kMaxShownValue) + "...";
  return text;
}

bool isStructured(const nlohmann::json& v) { return v.is_object() || v.is_array(); }

std::string difference(const nlohmann::json& ours, const nlohmann::json& theirs, const std::string& path) {
  if (ours == theirs) return {};
  const std::string here = path.empty() ? "fingerprint" : path;
  if (ours.is_object() && theirs.is_object()) {
    std::set<std::string> keys;
    for (const auto& item : ours.items()) keys.insert(item.key());
    for (const auto& item : theirs.items()) keys.insert(item.key());
    for (const auto& key : keys) {
      const std::string field = path.empty() ? key : path + "." + key;
      bool in_ours = ours.contains(key);
      bool in_theirs = theirs.contains(key);
      if (!in_ours) return fmt::format("{}: (missing) vs {}", field, show(theirs.at(key)));
      if (!in_theirs) return fmt::format("{}: {} vs (missing)", field, show(ours.at(key)));
      if (auto d = difference(ours.at(key), theirs.at(key), field); !d.empty()) return d;
    }
  }
  // Arrays of scalars (shapes) read best whole; arrays of structures are
  // walked so the message points into them.
  if (ours.is_array() && theirs.is_array() && ours.size() == theirs.size()) {
    for (size_t i = 0; i < ours.size(); ++i) {
      if (ours[i] != theirs[i] && (isStructured(ours[i]) || isStructured(theirs[i]))) {
        return difference(ours[i], theirs[i], fmt::format("{}[{}]", here, i));
      }
    }
  }
  return fmt::format("{}: {} vs {}", here, show(ours), show(theirs));
}

nlohmann::json parseFingerprint(const std::vector<char>& bytes, const std::string& task) {
  try {
    return nlohmann::json::parse(bytes.begin(), bytes.end());
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    throw InputError(fmt::format("fingerprint of {} is not valid JSON: {}", task, e.what()));
  }
}

}  // namespace

std::string joinKey(const std::string& generation, Role role, int index) {
  return fmt::format("{}/join/{}/{}", generation, roleKey(role), index);
}

std::string comparedKey(const std::string& join_key) { return join_key + "/compared"; }

std::string describeFingerprintDifference(const nlohmann::json& ours, const nlohmann::json& theirs) {
  // "about" names things (a model file's path) that may differ between
  // hosts; it is shown beside a difference, never compared.
  auto compared = [](nlohmann::json j) {
    if (j.is_object()) j.erase("about");
    return j;
  };
  std::string d = difference(compared(ours), compared(theirs), "");
  if (d.empty() || !ours.is_object() || !theirs.is_object() || !ours.contains("about")) return d;
  const auto about = theirs.value("about", nlohmann::json::object());
  std::string given;
  for (const auto& item : ours["about"].items()) {
    const auto other = about.value(item.key(), nlohmann::json());
    if (item.value() != other) given += fmt::format("; {} given: {} vs {}", item.key(), show(item.value()), show(other));
  }
  return d + given;
}

std::vector<std::string> awaitKeys(CoordinatorClient& store, const std::vector<std::string>& keys, Deadline deadline) {
  auto pause = kFirstPoll;
  while (true) {
    auto missing = store.missingKeys(keys, deadline.atLeast(kCheckRoundTrip));
    if (missing.empty() || deadline.expired() || stopRequested()) return missing;
    std::this_thread::sleep_for(std::min(pause, deadline.remaining()));
    pause = std::min(pause * 2, kMaxPoll);
  }
}

std::vector<std::string> awaitPublished(CoordinatorClient& store, const std::vector<std::string>& keys,
                                        Deadline deadline, const std::string& doing,
                                        const std::function<std::string(const std::string& key)>& name_of) {
  if (const auto missing = awaitKeys(store, keys, deadline); !missing.empty()) {
    std::vector<std::string> names;
    for (const auto& k : missing) names.push_back(name_of(k));
    if (!deadline.expired()) {
      throw Interrupted(
          fmt::format("stopped by a signal while {}: no address yet from {}", doing, fmt::join(names, ", ")));
    }
    throw PeerError(fmt::format("{}: no address from {} within the deadline", doing, fmt::join(names, ", ")));
  }
  std::vector<std::string> values;
  for (const auto& k : keys) {
    const auto value = store.tryGet(k);
    if (!value) throw PeerError(fmt::format("{}: {} vanished from the coordinator's store", doing, k));
    values.emplace_back(value->begin(), value->end());
  }
  return values;
}

void joinCluster(CoordinatorClient& store, const ClusterSpec& spec, const nlohmann::json& fingerprint,
                 Deadline deadline, bool include_ps, const std::string& generation) {
  const auto budget = net::budgetOf(deadline);
  std::vector<Task> tasks;
  for (int i = 0; i < spec.num_workers; ++i) {
    tasks.push_back({Role::kWorker, i, taskName(Role::kWorker, i), joinKey(generation, Role::kWorker, i)});
  }
  // A worker beyond the list (a growing job) is compared with worker 0 too.
  if (spec.beyondList()) {
    tasks.push_back({Role::kWorker, spec.index, spec.taskName(), joinKey(generation, Role::kWorker, spec.index)});
  }
  if (include_ps) {
    for (int i = 0; i < spec.numServers(); ++i) {
      tasks.push_back({Role::kPs, i, taskName(Role::kPs, i), joinKey(generation, Role::kPs, i)});
    }
  }
  std::vector<std::string> keys;
  for (const auto& t : tasks) keys.push_back(t.key);

  std::string mine = fingerprint.dump();
  store.set(joinKey(generation, spec.role, spec.index), std::vector<char>(mine.begin(), mine.end()),
            deadline.atLeast(kCheckRoundTrip));

  if (const auto missing = awaitKeys(store, keys, deadline); !missing.empty()) {
    std::set<std::string> absent(missing.begin(), missing.end());
    std::vector<const Task*> gone, joined;
    for (const auto& t : tasks) (absent.contains(t.key) ? gone : joined).push_back(&t);
    if (!deadline.expired()) {
      throw Interrupted(fmt::format("stopped by a signal during the rendezvous: {} had not arrived (joined: {})",
                                    joinNames(gone), joinNames(joined)));
    }
    throw PeerError(fmt::format("rendezvous timed out after {}: {} never arrived (joined: {})",
                                formatDuration(budget), joinNames(gone), joinNames(joined)));
  }

  // Every task reads the same stored fingerprints and compares them in the
  // same order against worker 0's, so all of them reach the same verdict
  // and fail together instead of leaving some waiting on the others.
  if (tasks.empty()) return;
  const Task& reference = tasks.front();
  nlohmann::json expected = parseFingerprint(store.get(reference.key), reference.name);
  std::string mismatch;
  for (size_t i = 1; i < tasks.size() && mismatch.empty(); ++i) {
    nlohmann::json theirs = parseFingerprint(store.get(tasks[i].key), tasks[i].name);
    if (auto d = describeFingerprintDifference(theirs, expected); !d.empty()) {
      mismatch = fmt::format("fingerprint mismatch: {} differs from {} in {}", tasks[i].name, reference.name, d);
    }
  }
  // The chief hosts the store, and its exit takes the store away: it goes
  // on once every other task has compared (or after a short grace). On a
  // mismatch all of them then name it rather than a vanished coordinator;
  // a chief with nothing to do (its run already finished) leaves at once,
  // and a task still polling for the keys lost the store under it.
  const std::string own = joinKey(generation, spec.role, spec.index);
  if (!spec.isChief()) {
    store.set(comparedKey(own), {}, deadline.atLeast(kCheckRoundTrip));
  } else {
    std::vector<std::string> compared;
    for (const auto& t : tasks) {
      if (t.key != own) compared.push_back(comparedKey(t.key));
    }
    (void)awaitKeys(store, compared, Deadline::after(std::min(kComparedGrace, deadline.remaining())));
  }
  if (!mismatch.empty()) throw InputError(mismatch);
}

}  // namespace tandem::cluster
