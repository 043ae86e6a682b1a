// Hierarchical aggregation for sync parameter servers (--hierarchical):
// two "hosts" on this machine (127.0.0.1 and 127.0.0.2, both loopback),
// two workers each, a server on each. The lab test (cli_lab_test) measures
// the host links; this one needs no root.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <filesystem>
#include <thread>

#include "support/process.hpp"
#include "support/run_artifacts.hpp"

namespace tandem {
namespace {
using testing::checkpointParameters;
using testing::maxAbsoluteDifference;
using testing::readFile;
using testing::TempDir;
namespace fs = std::filesystem;

struct Task {
  pid_t pid;
  std::string log;
};

// The flags of a job on two hosts: 2 servers (unless all-reduce) and 4
// workers (workers 0, 1 on 127.0.0.1; 2, 3 on 127.0.0.2; interleaved: 0, 2
// and 1, 3).
std::string twoHostsArgs(const TempDir& dir, const std::string& name, const std::string& extra, int64_t steps,
                         bool servers, bool interleaved) {
  std::vector<int> ports;
  for (int i = 0; i < 6; ++i) ports.push_back(testing::freePort());
  const char* second = interleaved ? "127.0.0.2" : "127.0.0.1";
  const char* third = interleaved ? "127.0.0.1" : "127.0.0.2";
  std::string cluster = fmt::format("--worker-hosts 127.0.0.1:{},{}:{},{}:{},127.0.0.2:{}", ports[0], second,
                                    ports[1], third, ports[2], ports[3]);
  if (servers) cluster += fmt::format(" --ps-hosts 127.0.0.1:{},127.0.0.2:{}", ports[4], ports[5]);
  return testing::syntheticTrainArgs("mlp", 32, dir.str(name), fmt::format("--max-steps {} --seed 9 {}", steps, extra)) +
         " " + cluster;
}

Task startTask(const TempDir& dir, const std::string& name, const std::string& args, const std::string& job, int i,
               const std::string& suffix = "") {
  const std::string log = dir.str(fmt::format("{}-{}{}{}.log", name, job, i, suffix));
  return {testing::spawnTandem(fmt::format("train {} --job-name {} --task-index {}", args, job, i), log), log};
}

// Starts the job of twoHostsArgs by hand: servers first, then workers 0-3.
std::vector<Task> startTwoHosts(const TempDir& dir, const std::string& name, const std::string& extra,
                                int64_t steps = 30, bool servers = true, bool interleaved = false) {
  const std::string args = twoHostsArgs(dir, name, extra, steps, servers, interleaved);
  std::vector<Task> tasks;
  for (const auto& [job, count] : {std::pair{"ps", servers ? 2 : 0}, std::pair{"worker", 4}}) {
    for (int i = 0; i < count; ++i) tasks.push_back(startTask(dir, name, args, job, i));
  }
  return tasks;
}

std::filesystem::path runTwoHosts(const TempDir& dir, const std::string& name, const std::string& extra,
                                  bool servers = true, bool interleaved = false) {
  for (const auto& t : startTwoHosts(dir, name, extra, 30, servers, interleaved)) {
    EXPECT_EQ(testing::waitForExit(t.pid, std::chrono::seconds(180)), 0) << readFile(t.log);
  }
  return dir.path() / name;
}

nlohmann::json serverSummary(const std::filesystem::path& run, int i) {
  return nlohmann::json::parse(readFile(run / "ps" / fmt::format("ps-{}", i) / "summary.json"));
}

int64_t serverPushes(const std::filesystem::path& run) {
  return serverSummary(run, 0)["pushes"].get<int64_t>() + serverSummary(run, 1)["pushes"].get<int64_t>();
}

int64_t serverChunks(const std::filesystem::path& run) {
  return serverSummary(run, 0)["chunks"].get<int64_t>() + serverSummary(run, 1)["chunks"].get<int64_t>();
}

// Runs `extra` with host sums (PREFIXauto) and without (PREFIXoff): each
// host pushes a chunk once per exchange, against once per worker, and both
// end within 1e-5 (the same mean, added in another order).
std::pair<std::filesystem::path, std::filesystem::path> expectHostsPushOnceLikeTheFlatLayout(
    const TempDir& dir, const std::string& prefix, const std::string& extra, int64_t exchanges) {
  const auto grouped = runTwoHosts(dir, prefix + "auto", extra);
  const auto flat = runTwoHosts(dir, prefix + "off", extra + " --hierarchical off");
  const int64_t chunks = serverChunks(flat);
  EXPECT_GE(chunks, 2);
  EXPECT_EQ(serverChunks(grouped), chunks);
  EXPECT_EQ(serverPushes(flat), 4 * exchanges * chunks);
  EXPECT_EQ(serverPushes(grouped), 2 * exchanges * chunks);
  EXPECT_NE(readFile(dir.path() / (prefix + "auto-worker3.log")).find("summed with 1 host-mate(s) first"),
            std::string::npos);
  EXPECT_LT(maxAbsoluteDifference(checkpointParameters((grouped / "checkpoint.ckpt").string()),
                                  checkpointParameters((flat / "checkpoint.ckpt").string())),
            1e-5);
  return {grouped, flat};
}

TEST(CliHierarchical, EachHostPushesOnceAndTrainsLikeTheFlatLayout) {
  TempDir dir;
  const auto [grouped, flat] = expectHostsPushOnceLikeTheFlatLayout(dir, "", "", 30);
  const auto start = testing::trainLosses(flat.string());
  ASSERT_GE(start.size(), 2u);
  EXPECT_LT(start.back(), start.front());  // it trained
}

// DiLoCo's outer gradients take the gradients' path: each host sums its
// workers' changes before one push a chunk, once per round.
TEST(CliHierarchical, DilocoRoundsArePushedOnceAHostAndTrainLikeTheFlatLayout) {
  TempDir dir;
  // 30 steps of 5: 6 rounds.
  const auto [grouped, flat] = expectHostsPushOnceLikeTheFlatLayout(dir, "dl-", "--local-steps 5", 6);
  // What the workers say they pushed is what reached the servers.
  for (const auto& run : {grouped, flat}) {
    int64_t pushed = 0;
    for (int w = 0; w < 4; ++w) {
      const auto dir_w = w == 0 ? run : run / "workers" / fmt::format("worker-{}", w);
      pushed += testing::summaryOf(dir_w)["strategy"]["diloco"]["pushed_bytes"].get<int64_t>();
    }
    EXPECT_EQ(pushed, serverSummary(run, 0)["bytes_in"].get<int64_t>() + serverSummary(run, 1)["bytes_in"].get<int64_t>())
        << run;
  }
}

// Many chunks of uneven sizes (the last one short), so each host-mate owns
// several and the two own different amounts: the share packs each one's
// chunks into one exchange and must unpack every value where it belongs.
TEST(CliHierarchical, ManyUnevenChunksComeBackWhereTheyBelong) {
  TempDir dir;
  const std::string chunks = "--ps-chunk-mb 0.02";  // 52,650 floats: 11 chunks of up to 5,000
  const auto grouped = runTwoHosts(dir, "auto", chunks);
  const auto flat = runTwoHosts(dir, "off", chunks + " --hierarchical off");
  EXPECT_EQ(serverPushes(grouped) * 2, serverPushes(flat));
  const auto a = checkpointParameters((grouped / "checkpoint.ckpt").string());
  const auto b = checkpointParameters((flat / "checkpoint.ckpt").string());
  EXPECT_LT(maxAbsoluteDifference(a, b), 1e-5);
}

// All-reduce: summed on each host, across the hosts' first workers, then
// back. The same mean gradient as the flat all-reduce, added in another
// order. Interleaved hosts, where flat halving-doubling would cross the
// links in its first round, so every bucket goes by host.
TEST(CliHierarchical, AllReduceSumsEachHostFirstAndTrainsLikeTheFlatLayout) {
  TempDir dir;
  const auto grouped = runTwoHosts(dir, "ar-auto", "", false, true);
  const auto flat = runTwoHosts(dir, "ar-off", "--hierarchical off", false, true);
  for (int w = 0; w < 4; ++w) {
    const std::string log = readFile(dir.path() / fmt::format("ar-auto-worker{}.log", w));
    EXPECT_NE(log.find("summed within each of 2 hosts first (--hierarchical auto)\n"), std::string::npos) << log;
  }
  EXPECT_EQ(readFile(dir.path() / "ar-off-worker0.log").find("summed within"), std::string::npos);
  const auto summary = nlohmann::json::parse(readFile(grouped / "summary.json"));
  EXPECT_EQ(summary["strategy"]["hierarchical"], true) << summary;
  const auto a = checkpointParameters((grouped / "checkpoint.ckpt").string());
  const auto b = checkpointParameters((flat / "checkpoint.ckpt").string());
  EXPECT_LT(maxAbsoluteDifference(a, b), 1e-5);
  const auto losses = testing::trainLosses(grouped.string());
  ASSERT_GE(losses.size(), 2u);
  EXPECT_LT(losses.back(), losses.front());  // it trained
}

// A host-mate killed mid-run: its partner fails at once naming it, and the
// other host's workers and the servers stop within the peer timeout.
TEST(CliHierarchical, AKilledHostMateIsNamedAndEveryTaskStops) {
  TempDir dir;
  auto tasks = startTwoHosts(dir, "kill", "--peer-timeout 5", 100000);
  ASSERT_TRUE(testing::waitForOutput(tasks[2].pid, dir.path() / "kill" / "metrics.jsonl", std::chrono::seconds(60)))
      << readFile(tasks[2].log);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  ::kill(tasks[3].pid, SIGKILL);  // worker 1
  const auto killed = std::chrono::steady_clock::now();
  for (size_t i : {2u, 4u, 5u, 0u, 1u}) {  // worker 0, workers 2 and 3, then the servers
    EXPECT_EQ(testing::waitForExit(tasks[i].pid, std::chrono::seconds(30)), 1) << readFile(tasks[i].log);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - killed, std::chrono::seconds(20));
  // Its host-mate names it: through the host group ("rank 1 is worker 1"),
  // or, when worker 1 died after the step's last host exchange but before
  // reporting the step, through ps 0's timeout ("for worker 1 (finished").
  const std::string partner = readFile(tasks[2].log);
  EXPECT_TRUE(partner.find("rank 1 is worker 1") != std::string::npos ||
              partner.find("for worker 1 (finished") != std::string::npos)
      << partner;
  // Worker 2 names worker 1 when it waited at the servers for worker 1's
  // pushes; when worker 1 had pushed worker 2's chunks but not its mate's,
  // worker 2 waited on its host-mate instead and names worker 3, whose own
  // log then names worker 1 (seen under load in CI).
  const std::string other = readFile(tasks[4].log);
  const std::string other_mate = readFile(tasks[5].log);
  const bool blames_mate = other.find("rank 1 is worker 3") != std::string::npos;
  EXPECT_TRUE(other.find("worker 1") != std::string::npos ||
              (blames_mate && other_mate.find("worker 1") != std::string::npos))
      << other << "\n--- worker 3:\n" << other_mate;
  testing::waitForExit(tasks[3].pid, std::chrono::seconds(5));
}

// A live job (--min-workers) across two hosts sums each host first in
// every generation: worker 3 killed leaves workers 0, 1 on one host and 2
// on the other, regrouped; worker 3 started again by hand joins and the
// hosts hold two each again. Nothing is rolled back, the replicas stay
// equal (checked every 5 steps), and the job runs its steps to the end.
TEST(CliHierarchical, ALiveJobRegroupsItsHostsWhenAWorkerDiesAndWhenItComesBack) {
  TempDir dir;
  const std::string args =
      twoHostsArgs(dir, "live", "--min-workers 2 --verify-replicas-every 5 --debug-step-delay-ms 20", 500,
                   /*servers=*/false, /*interleaved=*/false);
  std::vector<Task> tasks;
  for (int i = 0; i < 4; ++i) tasks.push_back(startTask(dir, "live", args, "worker", i));
  const fs::path run = dir.path() / "live";
  ASSERT_TRUE(testing::waitForOutput(tasks[0].pid, run / "metrics.jsonl", std::chrono::seconds(60)))
      << readFile(tasks[0].log);
  ::kill(tasks[3].pid, SIGKILL);
  EXPECT_EQ(testing::waitForExit(tasks[3].pid, std::chrono::seconds(10)), 128 + SIGKILL);
  ASSERT_TRUE(testing::waitForText(tasks[0].log, "generation 1 of 3 workers, summed within each of 2 hosts first",
                                   std::chrono::seconds(30)))
      << readFile(tasks[0].log) << readFile(tasks[1].log) << readFile(tasks[2].log);
  const Task again = startTask(dir, "live", args, "worker", 3, "-again");
  for (const Task& t : {tasks[0], tasks[1], tasks[2], again}) {
    EXPECT_EQ(testing::waitForExit(t.pid, std::chrono::seconds(180)), 0) << readFile(t.log);
  }
  for (const Task& t : {tasks[0], tasks[2], again}) {
    EXPECT_NE(readFile(t.log).find("generation 2 of 4 workers, summed within each of 2 hosts first"),
              std::string::npos)
        << readFile(t.log);
  }
  const auto changes = testing::jsonLines(run / "restarts.jsonl");
  ASSERT_EQ(changes.size(), 2u) << readFile(tasks[0].log);
  EXPECT_EQ(changes[0]["workers_before"], 4) << changes[0];
  EXPECT_EQ(changes[0]["workers_after"], 3) << changes[0];
  EXPECT_EQ(changes[1]["workers_after"], 4) << changes[1];
  for (const auto& c : changes) {
    EXPECT_EQ(c["lost_updates"], 0) << c;
    EXPECT_EQ(c["rolled_back"], false) << c;
  }
  const auto summary = nlohmann::json::parse(readFile(run / "summary.json"));
  EXPECT_EQ(summary["steps"], 500) << summary;
  EXPECT_EQ(summary["workers"], 4) << summary;
  EXPECT_EQ(summary["membership_changes"], 2) << summary;
}

}  // namespace
}  // namespace tandem
