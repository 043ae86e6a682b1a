#pragma once
// Joining the cluster: every task announces itself with a fingerprint of
// what must agree (model parameter names, shapes and dtypes; optimizer,
// batch size, mode, ...). All tasks wait for each other under one deadline
// and compare fingerprints, so a missing task or a mismatch fails every
// process with the same clear message instead of a hang.
#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "cluster/cluster_spec.hpp"
#include "cluster/coordinator.hpp"
#include "core/deadline.hpp"

namespace tandem::cluster {

// Announces `fingerprint` (a flat JSON object: field -> value) for this task,
// then waits until every task in `spec` (workers and, if `include_ps`, PS
// tasks) has joined, or the deadline passes.
// Throws PeerError "rendezvous timed out after Ns: worker 2, ps 0 never
// arrived" naming every missing task.
// Throws InputError naming the first differing field, both tasks and both
// values, when a fingerprint differs from worker 0's.
// `generation` separates successive rendezvous through one store.
void joinCluster(CoordinatorClient& store, const ClusterSpec& spec, const nlohmann::json& fingerprint,
                 Deadline deadline, bool include_ps = false, const std::string& generation = "train");

// The store key under which a task announces itself.
std::string joinKey(const std::string& generation, Role role, int index);
// After a fingerprint mismatch: the task at `join_key` has compared every
// fingerprint (the chief waits for these before it fails, taking the store
// with it).
std::string comparedKey(const std::string& join_key);

// Polls `store` until every one of `keys` is there, the deadline passes or
// a stop is requested (core/stop_request), with a growing pause. Returns
// the keys still missing: empty when all arrived. Each check gets its
// round trip even at the deadline, so a late task is told apart from a
// silent coordinator (which throws PeerError naming it).
std::vector<std::string> awaitKeys(CoordinatorClient& store, const std::vector<std::string>& keys, Deadline deadline);

// What tasks published under `keys` (their addresses), in order, once all
// are in. `doing` says what waits ("telling hosts apart"), `name_of` names
// a key's task ("worker 1"). Throws PeerError naming the tasks with nothing
// in by the deadline, Interrupted on a stop request.
std::vector<std::string> awaitPublished(CoordinatorClient& store, const std::vector<std::string>& keys,
                                        Deadline deadline, const std::string& doing,
                                        const std::function<std::string(const std::string& key)>& name_of);

// First field where `theirs` differs from `ours`, as "field: a vs b"; empty
// when equal. A top-level "about" object is not compared; where it differs
// it is appended ("; model given: a vs b"). Exposed for tests.
std::string describeFingerprintDifference(const nlohmann::json& ours, const nlohmann::json& theirs);

}  // namespace tandem::cluster
