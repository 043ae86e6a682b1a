#pragma once
// Hosts and their slots, as Horovod and Open MPI write them: "h1:4,h2:4"
// on the command line, "h1 slots=4" or "h1:4" lines in a hostfile, and
// "host[:slots]" lines from a discovery script. Pure: parsing and the
// placement of a job's tasks on the hosts.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::launch {

constexpr int kMaxSlots = 4096;

struct HostSlots {
  std::string host;  // without the brackets of an IPv6 address
  int slots = 1;
  bool operator==(const HostSlots&) const = default;
};

// One "host", "host:slots" or "[v6]:slots" (blanks around it allowed);
// nullopt when it is none of those or the slots are not 1 to kMaxSlots.
std::optional<HostSlots> parseHostSlots(std::string_view entry);

// launch --hosts "h1:4,h2:4". Throws InputError naming the entry that does
// not parse, and a host listed twice.
std::vector<HostSlots> parseHostList(std::string_view text);

// A hostfile: one host a line, "host slots=N" (Open MPI, Horovod) or
// "host:N" or "host"; '#' starts a comment. Throws InputError naming the
// file and line, a host listed twice, and a file that lists none.
std::vector<HostSlots> parseHostfile(std::string_view content, const std::string& file);

// Where each task of a job runs, by host name as listed.
struct TaskHosts {
  std::vector<std::string> workers;  // by rank: the first host's slots fill first
  std::vector<std::string> servers;  // by index: one a host in turn, from the last host back
  // Where task `index` of the role stands among the tasks on its host, and
  // how many share it: a worker among the workers there (torchrun's
  // LOCAL_RANK, LOCAL_WORLD_SIZE), a server among every task there.
  std::pair<int, int> localRank(bool server, int index) const;
};

// Workers fill the slots in the hosts' order, as horovodrun and mpirun
// place ranks; servers take no slot (they hold parameters, not a device)
// and go to the last hosts first, away from worker 0, who also runs the
// job's first checkpoint and evaluation. Throws InputError when the hosts'
// slots are fewer than `workers`.
TaskHosts placeTasks(const std::vector<HostSlots>& hosts, int workers, int servers);

}  // namespace tandem::launch
