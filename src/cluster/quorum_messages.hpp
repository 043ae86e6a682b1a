#pragma once
// The quorum's requests and its view as coordinator-store payloads. Every
// field a peer sends is checked before it is believed: ids in range, lists
// sorted and bounded, the source and the healing among the members.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "cluster/quorum.hpp"

namespace tandem::cluster {

// Worker ids a quorum message may name: as many as the store holds keys.
inline constexpr int kMaxQuorumWorkers = 1 << 16;
// A departure's reason or a stop's message, at most.
inline constexpr size_t kMaxQuorumText = 4096;

// A heartbeat, an arrival at a step boundary or a departure: the worker,
// the generation it last knew, and the steps it has done (-1: none yet).
struct QuorumRequest {
  int worker = 0;
  int64_t generation = 0;
  int64_t step = -1;
};

std::vector<char> encodeQuorumRequest(const QuorumRequest& request);
// Throws InputError naming `peer` and the field.
QuorumRequest decodeQuorumRequest(std::span<const std::byte> bytes, std::string_view peer, std::string_view what);

// The chief's request that the coordinator host the job's quorum: the
// starting workers, the step they start at, and the options.
struct QuorumHosting {
  int workers = 1;
  int64_t first_step = 0;
  QuorumOptions options;
};

std::vector<char> encodeQuorumHosting(const QuorumHosting& hosting);
// Throws InputError naming `peer` and the field.
QuorumHosting decodeQuorumHosting(std::span<const std::byte> bytes, std::string_view peer);

std::vector<char> encodeQuorumView(const QuorumView& view);
// Throws InputError naming `peer` and the field.
QuorumView decodeQuorumView(std::span<const std::byte> bytes, std::string_view peer);

}  // namespace tandem::cluster
