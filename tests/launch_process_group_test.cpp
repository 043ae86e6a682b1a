#include "launch/free_ports.hpp"
#include "launch/process_group.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "core/error.hpp"
#include "support/process.hpp"

namespace tandem::launch {
namespace {

using namespace std::chrono_literals;
using tandem::testing::TempDir;

ChildSpec spec(const std::string& name, std::vector<std::string> argv,
               std::vector<std::pair<std::string, std::string>> env = {}) {
  ChildSpec child;
  child.name = name;
  child.argv = std::move(argv);
  child.extra_env = std::move(env);
  return child;
}

ChildSpec sh(const std::string& name, const std::string& script,
             std::vector<std::pair<std::string, std::string>> env = {}) {
  return spec(name, {"/bin/sh", "-c", script}, std::move(env));
}

// A file the relay writes into, read back after wait().
class CapturedOutput {
 public:
  CapturedOutput() : file_(std::tmpfile()) {}
  ~CapturedOutput() {
    if (file_ != nullptr) std::fclose(file_);
  }
  int fd() const { return ::fileno(file_); }
  std::string text() const {
    std::string out;
    char buf[4096];
    ssize_t n = 0;
    off_t offset = 0;
    while ((n = ::pread(fd(), buf, sizeof buf, offset)) > 0) {
      out.append(buf, static_cast<size_t>(n));
      offset += n;
    }
    return out;
  }
  std::vector<std::string> lines() const {
    std::vector<std::string> result;
    std::istringstream in(text());
    for (std::string line; std::getline(in, line);) result.push_back(line);
    return result;
  }

 private:
  std::FILE* file_;
};

const ChildExit* findExit(const GroupResult& result, const std::string& name) {
  for (const auto& e : result.exits) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

bool processGone(pid_t pid) {
  // Reaped: not our child any more, and no such process (a zombie would still answer kill 0).
  errno = 0;
  bool not_child = ::waitpid(pid, nullptr, WNOHANG) < 0 && errno == ECHILD;
  return not_child && ::kill(pid, 0) != 0 && errno == ESRCH;
}

void waitForFile(const std::string& path) {
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!std::filesystem::exists(path) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
}

TEST(ChildExitTest, Describe) {
  ChildExit status{"worker 1", 123, 3, false, 0};
  EXPECT_EQ(status.describe(), "worker 1 (pid 123) exited with status 3");
  ChildExit killed{"worker 1", 123, 0, true, SIGKILL};
  EXPECT_EQ(killed.describe(), "worker 1 (pid 123) was killed by signal 9 (SIGKILL)");
  ChildExit odd{"ps 0", 7, 0, true, 40};
  EXPECT_EQ(odd.describe(), "ps 0 (pid 7) was killed by signal 40");
}

TEST(ProcessGroupTest, NoChildrenIsOk) {
  ProcessGroup group(captureEnvironment(), true);
  GroupResult result = group.wait(100ms);
  EXPECT_TRUE(result.ok);
  EXPECT_TRUE(result.exits.empty());
}

TEST(ProcessGroupTest, AllSucceed) {
  CapturedOutput out;
  ProcessGroup group(captureEnvironment(), true, out.fd());
  group.start(sh("worker 0", "exit 0"));
  group.start(sh("worker 1", "sleep 0.1; exit 0"));
  GroupResult result = group.wait(1s);
  EXPECT_TRUE(result.ok);
  EXPECT_EQ(result.first_failure, "");
  ASSERT_EQ(result.exits.size(), 2u);
  for (const auto& e : result.exits) {
    EXPECT_FALSE(e.signaled);
    EXPECT_EQ(e.exit_code, 0);
    EXPECT_GT(e.pid, 0);
  }
  // Exits are listed in exit order; worker 1 sleeps first.
  EXPECT_EQ(result.exits[0].name, "worker 0");
}

TEST(ProcessGroupTest, UnprefixedChildrenInheritOutput) {
  ProcessGroup group(captureEnvironment(), false);
  group.start(sh("worker 0", "exit 0"));
  EXPECT_TRUE(group.wait(1s).ok);
}

TEST(ProcessGroupTest, FailureTerminatesTheRest) {
  CapturedOutput out;
  ProcessGroup group(captureEnvironment(), true, out.fd());
  group.start(sh("worker 0", "exec sleep 30"));
  group.start(sh("worker 1", "sleep 0.2; exit 3"));
  auto start = std::chrono::steady_clock::now();
  GroupResult result = group.wait(5s);
  EXPECT_LT(secondsSince(start), 5.0);
  EXPECT_FALSE(result.ok);
  const ChildExit* failed = findExit(result, "worker 1");
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(result.first_failure, failed->describe());
  EXPECT_NE(result.first_failure.find("worker 1 (pid "), std::string::npos) << result.first_failure;
  EXPECT_NE(result.first_failure.find("exited with status 3"), std::string::npos) << result.first_failure;
  const ChildExit* sleeper = findExit(result, "worker 0");
  ASSERT_NE(sleeper, nullptr);
  EXPECT_TRUE(sleeper->signaled);
  EXPECT_EQ(sleeper->signal, SIGTERM);
  ASSERT_EQ(result.exits.size(), 2u);
  EXPECT_EQ(result.exits[0].name, "worker 1");  // exit order
}

TEST(ProcessGroupTest, EscalatesToSigkillAfterGrace) {
  TempDir dir;
  std::string ready = dir.str("ready");
  CapturedOutput out;
  ProcessGroup group(captureEnvironment(), true, out.fd());
  // The stubborn child ignores SIGTERM; the failing one waits until it does.
  group.start(sh("stubborn", "trap '' TERM; touch " + ready + "; exec sleep 30"));
  group.start(sh("failing", "while [ ! -f " + ready + " ]; do sleep 0.01; done; exit 1"));
  auto start = std::chrono::steady_clock::now();
  GroupResult result = group.wait(300ms);
  double elapsed = secondsSince(start);
  EXPECT_LT(elapsed, 5.0);
  EXPECT_FALSE(result.ok);
  const ChildExit* stubborn = findExit(result, "stubborn");
  ASSERT_NE(stubborn, nullptr);
  EXPECT_TRUE(stubborn->signaled);
  EXPECT_EQ(stubborn->signal, SIGKILL);
  EXPECT_NE(result.first_failure.find("failing"), std::string::npos);
}

TEST(ProcessGroupTest, ReportsDeathBySignal) {
  CapturedOutput out;
  ProcessGroup group(captureEnvironment(), true, out.fd());
  group.start(sh("worker 2", "kill -9 $$"));
  GroupResult result = group.wait(1s);
  EXPECT_FALSE(result.ok);
  ASSERT_EQ(result.exits.size(), 1u);
  EXPECT_TRUE(result.exits[0].signaled);
  EXPECT_EQ(result.exits[0].signal, SIGKILL);
  EXPECT_NE(result.first_failure.find("worker 2 (pid "), std::string::npos);
  EXPECT_NE(result.first_failure.find("was killed by signal 9 (SIGKILL)"), std::string::npos) << result.first_failure;
}

TEST(ProcessGroupTest, PrefixesLinesWithoutInterleaving) {
  CapturedOutput out;
  ProcessGroup group(captureEnvironment(), true, out.fd());
  // Many small writes from two children at once, stdout and stderr mixed, and
  // a last line without a newline.
  std::string script =
      "i=0; while [ $i -lt 300 ]; do printf 'line %d of %s\\n' $i \"$WHO\"; "
      "if [ $((i % 50)) -eq 0 ]; then echo \"err $i\" >&2; fi; i=$((i+1)); done; printf 'tail'";
  group.start(sh("w0", script, {{"WHO", "w0"}}));
  group.start(sh("w1", script, {{"WHO", "w1"}}));
  ASSERT_TRUE(group.wait(1s).ok);
  std::map<std::string, int> lines_per_child;
  std::map<std::string, int> next_line;
  std::map<std::string, int> next_err;
  for (const auto& line : out.lines()) {
    // Expected shapes: "[wN] line K of wN", "[wN] err K", "[wN] tail".
    ASSERT_GE(line.size(), 5u) << "mangled line: '" << line << "'";
    std::string child = line.substr(1, 2);
    ASSERT_TRUE(line.compare(0, 5, "[" + child + "] ") == 0 && (child == "w0" || child == "w1"))
        << "mangled line: '" << line << "'";
    std::string body = line.substr(5);
    ++lines_per_child[child];
    if (body == "tail") continue;
    if (body.starts_with("line ")) {
      EXPECT_EQ(body, "line " + std::to_string(next_line[child]) + " of " + child) << "lost, reordered or mixed";
      ++next_line[child];
    } else {
      EXPECT_EQ(body, "err " + std::to_string(next_err[child])) << "mangled line: '" << line << "'";
      next_err[child] += 50;
    }
  }
  // 300 lines, 6 stderr lines, the flushed tail.
  EXPECT_EQ(lines_per_child["w0"], 307);
  EXPECT_EQ(lines_per_child["w1"], 307);
  std::string text = out.text();
  EXPECT_NE(text.find("[w0] tail\n"), std::string::npos);
  EXPECT_NE(text.find("[w1] tail\n"), std::string::npos);
}

TEST(ProcessGroupTest, ChildrenStartWithTheGroupsEnvironmentAndTheirOwn) {
  Environment ours = captureEnvironment();
  ours["TANDEM_PG_TEST_VAR"] = "ours";
  CapturedOutput out;
  ProcessGroup group(ours, true, out.fd());
  group.start(sh("c", "echo \"$TANDEM_PG_TEST_VAR $TANDEM_PG_NEW\"; env | grep -c '^TANDEM_PG_TEST_VAR='",
                 {{"TANDEM_PG_TEST_VAR", "theirs"}, {"TANDEM_PG_NEW", "new"}}));
  group.start(sh("d", "echo \"$TANDEM_PG_TEST_VAR\""));
  ASSERT_TRUE(group.wait(1s).ok);
  std::string text = out.text();
  EXPECT_NE(text.find("[c] theirs new\n"), std::string::npos) << text;
  EXPECT_NE(text.find("[c] 1\n"), std::string::npos) << text;  // replaced, not duplicated
  EXPECT_NE(text.find("[d] ours\n"), std::string::npos) << text;
}

// A failed child started again in its place, with what `replace` added to
// its spec; the others run on and the group ends well.
TEST(ProcessGroupTest, AReplacedChildStartsAgainFromTheSpecReplaceLeaves) {
  CapturedOutput out;
  ProcessGroup group(captureEnvironment(), true, out.fd());
  group.start(sh("c", "if [ -n \"$TANDEM_PG_AGAIN\" ]; then echo again $TANDEM_PG_AGAIN; else exit 3; fi"));
  group.start(sh("d", "sleep 0.3; echo done"));
  int asked = 0;
  GroupResult result = group.wait(1s, {}, {}, [&](const ChildExit& e, ChildSpec& spec) {
    ++asked;
    EXPECT_EQ(e.name, "c");
    EXPECT_EQ(e.exit_code, 3);
    spec.extra_env.emplace_back("TANDEM_PG_AGAIN", "1");
    return true;
  });
  EXPECT_TRUE(result.ok) << result.first_failure;
  EXPECT_EQ(asked, 1);
  ASSERT_EQ(result.exits.size(), 3u);
  std::string text = out.text();
  EXPECT_NE(text.find("[c] again 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("[d] done\n"), std::string::npos) << text;
}

TEST(ProcessGroupTest, ExecFailureExits127WithMessage) {
  CapturedOutput out;
  ProcessGroup group(captureEnvironment(), true, out.fd());
  group.start(spec("bad", {"/nonexistent/tandem-prog", "x"}));
  GroupResult result = group.wait(1s);
  EXPECT_FALSE(result.ok);
  ASSERT_EQ(result.exits.size(), 1u);
  EXPECT_EQ(result.exits[0].exit_code, 127);
  EXPECT_NE(out.text().find("[bad] tandem: cannot start bad: exec '/nonexistent/tandem-prog' failed: no such file"),
            std::string::npos)
      << out.text();
}

TEST(ProcessGroupTest, EmptyCommandLineThrowsNamingChild) {
  ProcessGroup group(captureEnvironment(), true);
  try {
    group.start(spec("worker 4", {}));
    ADD_FAILURE() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("worker 4"), std::string::npos) << e.what();
  }
}

TEST(ProcessGroupTest, ForwardsStopSignal) {
  TempDir dir;
  std::string ready = dir.str("ready");
  CapturedOutput out;
  ProcessGroup group(captureEnvironment(), true, out.fd());
  group.start(sh("worker 0", "trap 'kill $!; exit 7' TERM; sleep 30 & touch " + ready + "; wait"));
  bool sent = false;
  auto start = std::chrono::steady_clock::now();
  GroupResult result = group.wait(5s, [&] {
    // Signal once, and only after the trap is in place.
    if (sent || !std::filesystem::exists(ready)) return 0;
    sent = true;
    return SIGTERM;
  });
  EXPECT_LT(secondsSince(start), 5.0);
  EXPECT_TRUE(sent);
  ASSERT_EQ(result.exits.size(), 1u);
  EXPECT_FALSE(result.exits[0].signaled);
  EXPECT_EQ(result.exits[0].exit_code, 7);
}

TEST(ProcessGroupTest, GrandchildHoldingThePipeDoesNotDelayWait) {
  CapturedOutput out;
  ProcessGroup group(captureEnvironment(), true, out.fd());
  // The background sleep keeps the pipe's write end open after sh exits.
  group.start(sh("g", "sleep 3 & echo done"));
  auto start = std::chrono::steady_clock::now();
  GroupResult result = group.wait(1s);
  EXPECT_LT(secondsSince(start), 2.0);
  EXPECT_TRUE(result.ok);
  EXPECT_NE(out.text().find("[g] done\n"), std::string::npos) << out.text();
}

TEST(ProcessGroupTest, DestructorKillsAndReaps) {
  TempDir dir;
  std::string pid_file = dir.str("pid");
  CapturedOutput out;
  auto start = std::chrono::steady_clock::now();
  {
    ProcessGroup group(captureEnvironment(), true, out.fd());
    group.start(sh("worker 0", "echo $$ > " + pid_file + ".tmp; mv " + pid_file + ".tmp " + pid_file +
                                   "; sleep 2 & exec sleep 30"));
    waitForFile(pid_file);
  }
  EXPECT_LT(secondsSince(start), 5.0);
  pid_t pid = std::stoi(tandem::testing::readFile(pid_file));
  EXPECT_TRUE(processGone(pid)) << pid;
}

TEST(ProcessGroupTest, SignalAllReachesChildren) {
  TempDir dir;
  std::string ready = dir.str("ready");
  CapturedOutput out;
  ProcessGroup group(captureEnvironment(), true, out.fd());
  group.start(sh("worker 0", "trap 'exit 5' USR1; touch " + ready + "; while :; do sleep 0.05; done"));
  waitForFile(ready);
  group.signalAll(SIGUSR1);
  GroupResult result = group.wait(1s);
  ASSERT_EQ(result.exits.size(), 1u);
  EXPECT_EQ(result.exits[0].exit_code, 5);
}

TEST(SelfExecutableTest, NamesThisBinary) {
  std::string self = selfExecutable();
  EXPECT_EQ(std::filesystem::path(self).filename(), "tandem_launch_tests");
  EXPECT_TRUE(std::filesystem::exists(self));
}

TEST(PickFreePortTest, ReturnsBindablePort) {
  int port = pickFreePort("127.0.0.1");
  ASSERT_GT(port, 0);
  ASSERT_LE(port, 65535);
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  ::close(fd);
}

TEST(PickFreePortTest, UnresolvableHostIsInputError) {
  EXPECT_THROW(pickFreePort("no-such-host.invalid"), InputError);
}

// A launch picks every task's port in one go: picked one by one, a port
// just closed can come back (a bench's 8-worker launch got worker 2 and ps 0
// on one port), and the job fails.
TEST(PickFreePorts, AreAllDifferent) {
  const std::vector<int> ports = pickFreePorts("127.0.0.1", 256);
  ASSERT_EQ(ports.size(), 256u);
  EXPECT_EQ(std::set<int>(ports.begin(), ports.end()).size(), 256u);
  for (int port : ports) EXPECT_GT(port, 0);
  EXPECT_THROW(pickFreePorts("no-such-host.invalid", 2), InputError);
}

}  // namespace
}  // namespace tandem::launch
