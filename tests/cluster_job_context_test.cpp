// The job context and the process set-up every entry point builds once:
// nothing below them reads the environment or a global.
#include "cluster/job_context.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

#include "cluster/coordinator.hpp"
#include "cluster/process_setup.hpp"
#include "core/error.hpp"
#include "support/expect_input_error.hpp"

namespace tandem::cluster {
namespace {

using namespace std::chrono_literals;

TEST(JobContext, ReadsItsStartFromItsEnvironmentAndHasNoSecurityUntilGivenOne) {
  Environment env{{"TANDEM_RESTART", "replaces=abc;until_ms=0;restarts=2"}};
  const JobContext restarted(env);
  env.clear();
  EXPECT_EQ(restarted.start().replaces, 0xabcu);
  EXPECT_EQ(restarted.start().restarts, 2);
  EXPECT_EQ(lookupVariable(restarted.environment(), "TANDEM_RESTART"), "replaces=abc;until_ms=0;restarts=2");
  JobContext first(env);  // no variable: a first start
  EXPECT_EQ(first.start().replaces, 0u);
  EXPECT_EQ(first.start().restarts, 0);
  EXPECT_THROW(first.security(), Error) << "sockets were offered a security nobody resolved";
  first.setSecurity(net::JobSecurity::insecure());
  EXPECT_FALSE(first.security().secure());
  testing::expectInputError([] { JobContext bad(Environment{{"TANDEM_RESTART", "replaces=zz"}}); },
                            {"TANDEM_RESTART"});
}

// Two jobs in one process, each with its own secret: each coordinator
// serves its own job's client and refuses the other's.
TEST(JobContext, TwoJobsWithTheirOwnSecretsLiveInOneProcess) {
  const JobContext a(net::JobSecurity::withKeys(net::generateJobKeys()));
  const JobContext b(net::JobSecurity::withKeys(net::generateJobKeys()));
  CoordinatorServer server_a("127.0.0.1", 0, a.security());
  CoordinatorServer server_b("127.0.0.1", 0, b.security());
  CoordinatorClient member_a({"127.0.0.1", server_a.port()}, 2000ms, a.security());
  member_a.set("k", {'a'});
  EXPECT_EQ(member_a.get("k"), std::vector<char>{'a'});
  CoordinatorClient outsider({"127.0.0.1", server_b.port()}, 300ms, a.security());
  EXPECT_THROW(outsider.set("k", {'x'}), PeerError) << "job b's coordinator served job a's client";
  CoordinatorClient member_b({"127.0.0.1", server_b.port()}, 2000ms, b.security());
  EXPECT_FALSE(member_b.tryGet("k").has_value()) << "the outsider's write reached job b's store";
}

TEST(ProcessSetup, FindsTheClusterTheLocalRankAndTheThreadsInOnePlace) {
  const Environment env = {
      {"TF_CONFIG", R"({"cluster":{"worker":["127.0.0.1:7000","127.0.0.1:7001"]},"task":{"type":"worker","index":1}})"},
      {"OMP_NUM_THREADS", "3"}};
  const ProcessSetup setup = setUpProcess({}, 0, env);
  ASSERT_TRUE(setup.spec.has_value());
  EXPECT_EQ(setup.spec->index, 1);
  EXPECT_EQ(setup.local.rank, 1) << "the second worker on this host";
  EXPECT_EQ(setup.local.count, 2);
  EXPECT_EQ(setup.threads.threads, 3);
  EXPECT_EQ(setUpProcess({}, 2, env).threads.threads, 2) << "--threads wins over OMP_NUM_THREADS";
  EXPECT_NO_THROW(requireWorkerTask(setup, "tandem::init"));
  const ProcessSetup alone = setUpProcess({}, 1, {});
  EXPECT_FALSE(alone.spec.has_value());
  EXPECT_EQ(alone.local.rank, 0);
}

TEST(ProcessSetup, TheApisRefuseToRunAsAParameterServerNamingTheEntry) {
  const Environment env = {
      {"TF_CONFIG", R"({"cluster":{"worker":["127.0.0.1:7000"],"ps":["127.0.0.1:7100"]},"task":{"type":"ps","index":0}})"}};
  const ProcessSetup setup = setUpProcess({}, 1, env);
  testing::expectInputError([&] { requireWorkerTask(setup, "tandem::fit"); }, {"tandem::fit", "ps 0", "tandem launch --ps"});
}

}  // namespace
}  // namespace tandem::cluster
