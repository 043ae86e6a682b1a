// The launcher's side of a task over ssh: the command line ssh gets, the
// environment that travels, quoting a shell undoes; and the agent itself,
// run as `tandem remote-task` with its stdin a pipe this test holds.
#include "launch/remote_task.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <filesystem>

#include "net/job_security.hpp"
#include "support/process.hpp"

namespace tandem::launch {
namespace {

TEST(RemoteTaskTest, ShellQuotingSurvivesAShell) {
  EXPECT_EQ(shellQuote("plain-word_1.2/x:y=z"), "plain-word_1.2/x:y=z");
  EXPECT_EQ(shellQuote(""), "''");
  EXPECT_EQ(shellQuote("it's a $HOME `x`"), "'it'\\''s a $HOME `x`'");
  // What /bin/sh makes of it is the word itself.
  const std::string word = "a b'c\"d $e\\f\n{g}";
  const std::string script = "printf %s " + shellQuote(word);
  FILE* sh = ::popen(("/bin/sh -c " + shellQuote(script)).c_str(), "r");
  ASSERT_NE(sh, nullptr);
  std::string got;
  char buf[256];
  while (size_t n = std::fread(buf, 1, sizeof buf, sh)) got.append(buf, n);
  ::pclose(sh);
  EXPECT_EQ(got, word);
}

TEST(RemoteTaskTest, TheLoginsOwnVariablesStayBehind) {
  const Environment env{{"PATH", "/x/bin"},   {"PYTHONPATH", "/p"}, {"HOME", "/root"},   {"SSH_AUTH_SOCK", "/s"},
                        {"TERM", "xterm"},    {"OMP_NUM_THREADS", "2"}, {"BASH_FUNC_f%%", "() {}"}, {"A-B", "1"},
                        {"TANDEM_X", "y"}};
  EXPECT_EQ(forwardedEnvironment(env),
            (Environment{{"PATH", "/x/bin"}, {"PYTHONPATH", "/p"}, {"OMP_NUM_THREADS", "2"}, {"TANDEM_X", "y"}}));
}

TEST(RemoteTaskTest, SshRunsTheAgentInLaunchsDirectoryWithTheTasksEnvironment) {
  const SshOptions ssh{.port = 2222, .identity_file = "/k/id", .options = {"UserKnownHostsFile=/k/known"}};
  const std::vector<std::string> command =
      sshCommand(ssh, "h2", "/home/me/my job", "/opt/tandem", {{"RANK", "1"}, {"NOTE", "a b"}},
                 {"/usr/bin/python3", "train.py", "--lr", "0.1"});
  EXPECT_EQ(command, (std::vector<std::string>{
                         "ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-p", "2222", "-i", "/k/id",
                         "-o", "UserKnownHostsFile=/k/known", "h2",
                         "cd '/home/me/my job' && exec env NOTE='a b' RANK=1 /opt/tandem remote-task -- "
                         "/usr/bin/python3 train.py --lr 0.1"}));
  EXPECT_EQ(sshCommand({}, "h3", "/", "t", {}, {"x"}),
            (std::vector<std::string>{"ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "h3",
                                      "cd / && exec env t remote-task -- x"}));
}

TEST(RemoteTaskTest, TheGreetingCarriesTheSecretBeforeStart) {
  EXPECT_EQ(agentGreeting(""), "start\n");
  EXPECT_EQ(agentGreeting("tandem-job-secret-v1 a b"), "secret tandem-job-secret-v1 a b\nstart\n");
}

// The agent in a child process of its own, its stdin a pipe held here and
// its output in a file.
class Agent {
 public:
  Agent(const std::vector<std::string>& argv, const std::string& output) : output_(output) {
    int in[2];
    EXPECT_EQ(::pipe(in), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], STDIN_FILENO);
      ::close(in[1]);
      const int out = ::open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(out, STDOUT_FILENO);
      ::dup2(out, STDERR_FILENO);
      ::_exit(runRemoteAgent(argv, {{"PATH", "/usr/bin:/bin"}}, std::chrono::milliseconds(2000)));
    }
    ::close(in[0]);
    control_ = in[1];
  }
  ~Agent() {
    if (control_ >= 0) ::close(control_);
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  void say(const std::string& text) { ASSERT_EQ(::write(control_, text.data(), text.size()), ssize_t(text.size())); }
  void hangUp() {
    ::close(control_);
    control_ = -1;
  }
  std::string output() const {
    std::ifstream in(output_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  bool awaitOutput(const std::string& text) const {
    for (int i = 0; i < 500; ++i) {
      if (output().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  int exitStatus() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  std::string output_;
  pid_t pid_ = -1;
  int control_ = -1;
  bool reaped_ = false;
};

// Says "ready", then exits 7 on SIGTERM and 8 on SIGUSR1.
const std::vector<std::string> kPatientTask{
    "/bin/sh", "-c", "trap 'echo got TERM; exit 7' TERM; trap 'exit 8' USR1; echo ready; while :; do sleep 0.02; done"};

TEST(RemoteAgentTest, ForwardsASignalLineAndExitsWithTheTasksStatus) {
  testing::TempDir dir;
  Agent agent(kPatientTask, dir.str("out"));
  agent.say("start\n");
  ASSERT_TRUE(agent.awaitOutput("ready")) << agent.output();
  agent.say(fmt::format("signal {}\n", SIGUSR1));
  EXPECT_EQ(agent.exitStatus(), 8) << agent.output();
}

TEST(RemoteAgentTest, AClosedChannelStopsTheTask) {
  testing::TempDir dir;
  Agent agent(kPatientTask, dir.str("out"));
  agent.say("start\n");
  ASSERT_TRUE(agent.awaitOutput("ready")) << agent.output();
  agent.hangUp();
  EXPECT_EQ(agent.exitStatus(), 7) << agent.output();
  EXPECT_NE(agent.output().find("remote-task: the launcher's connection closed; stopping '/bin/sh'"),
            std::string::npos)
      << agent.output();
}

TEST(RemoteAgentTest, TheSecretIsHeldInAPrivateFileForTheTasksLifeOnly) {
  testing::TempDir dir;
  // The file's comments aside, its line is the one sent.
  Agent agent({"/bin/sh", "-c", "stat -c %a \"$TANDEM_SECRET_FILE\"; grep -v '^#' \"$TANDEM_SECRET_FILE\"; "
                                "echo \"$TANDEM_SECRET_FILE\""},
              dir.str("out"));
  const std::string sent = net::secretLine(net::generateJobKeys());
  agent.say("secret " + sent + "\nstart\n");
  EXPECT_EQ(agent.exitStatus(), 0);
  std::istringstream lines(agent.output());
  std::string mode, secret, path;
  std::getline(lines, mode);
  std::getline(lines, secret);
  std::getline(lines, path);
  EXPECT_EQ(mode, "600");
  EXPECT_EQ(secret, sent);
  EXPECT_FALSE(std::filesystem::exists(path)) << path;
}

TEST(RemoteAgentTest, ATaskKilledBySignalExits128PlusItAndSaysSo) {
  testing::TempDir dir;
  Agent agent({"/bin/sh", "-c", "kill -9 $$"}, dir.str("out"));
  agent.say("start\n");
  EXPECT_EQ(agent.exitStatus(), 137);
  EXPECT_NE(agent.output().find("remote-task: '/bin/sh' was killed by signal 9 (KILL)"), std::string::npos)
      << agent.output();
}

TEST(RemoteAgentTest, ALauncherGoneBeforeStartRunsNothing) {
  testing::TempDir dir;
  Agent agent({"/bin/sh", "-c", "echo ran"}, dir.str("out"));
  agent.hangUp();
  EXPECT_EQ(agent.exitStatus(), 1);
  EXPECT_EQ(agent.output().find("ran"), std::string::npos);
}

}  // namespace
}  // namespace tandem::launch
