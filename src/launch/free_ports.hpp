#pragma once
// Ports for a job's tasks on one host, picked before the tasks start.
#include <string>
#include <vector>

namespace tandem::launch {

// A TCP port on `host` that was free a moment ago (bind to 0, read, close).
int pickFreePort(const std::string& host = "127.0.0.1");
// `count` such ports, all different: each stays bound until the last is picked.
std::vector<int> pickFreePorts(const std::string& host, int count);

}  // namespace tandem::launch
