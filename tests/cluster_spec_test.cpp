#include "cluster/cluster_spec.hpp"
#include "cluster/slurm.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

#include "support/expect_input_error.hpp"

namespace tandem::cluster {
namespace {

using tandem::testing::expectInputError;

ClusterFlags workerFlags(const std::string& hosts, const std::string& job, int index) {
  ClusterFlags flags;
  flags.worker_hosts = hosts;
  flags.job_name = job;
  flags.task_index = index;
  return flags;
}

ClusterSpec resolve(const ClusterFlags& flags, const Environment& env = {}) {
  auto spec = resolveClusterSpec(flags, env);
  EXPECT_TRUE(spec.has_value());
  return spec.value_or(ClusterSpec{});
}

void expectRejected(const ClusterFlags& flags, const Environment& env, const std::vector<std::string>& needles) {
  expectInputError([&] { resolveClusterSpec(flags, env); }, needles);
}

// --- HostPort ---

TEST(HostPortTest, ParsesAndPrints) {
  EXPECT_EQ(parseHostPort("127.0.0.1:2222", "f"), (HostPort{"127.0.0.1", 2222}));
  EXPECT_EQ(parseHostPort("node-3.example:65535", "f"), (HostPort{"node-3.example", 65535}));
  EXPECT_EQ(parseHostPort("[::1]:80", "f"), (HostPort{"::1", 80}));
  EXPECT_EQ((HostPort{"::1", 80}).str(), "[::1]:80");
  EXPECT_EQ((HostPort{"h", 1}).str(), "h:1");
}

TEST(HostPortTest, RejectsMalformedNamingField) {
  expectInputError([] { parseHostPort("127.0.0.1:x", "--worker_hosts"); }, {"--worker_hosts", "'127.0.0.1:x'", "port"});
  expectInputError([] { parseHostPort("h:0", "fld"); }, {"fld", "h:0", "port"});
  expectInputError([] { parseHostPort("h:65536", "fld"); }, {"fld", "65536"});
  expectInputError([] { parseHostPort("h:-1", "fld"); }, {"fld", "port"});
  expectInputError([] { parseHostPort("h:", "fld"); }, {"fld", "port"});
  expectInputError([] { parseHostPort("h", "fld"); }, {"fld", "no port"});
  expectInputError([] { parseHostPort(":80", "fld"); }, {"fld", "no host"});
  expectInputError([] { parseHostPort("", "fld"); }, {"fld", "empty"});
  expectInputError([] { parseHostPort("::1:80", "fld"); }, {"fld", "brackets"});
  expectInputError([] { parseHostPort("[::1]80", "fld"); }, {"fld", "[::1]80"});
  expectInputError([] { parseHostPort("[]:80", "fld"); }, {"fld", "no host"});
}

TEST(TaskNameTest, NamesRoleAndIndex) {
  EXPECT_EQ(taskName(Role::kWorker, 1), "worker 1");
  EXPECT_EQ(taskName(Role::kPs, 0), "ps 0");
  ClusterSpec spec;
  spec.role = Role::kPs;
  spec.index = 2;
  EXPECT_EQ(spec.taskName(), "ps 2");
  EXPECT_FALSE(spec.isChief());
}

TEST(CaptureEnvironmentTest, SeesProcessEnvironment) {
  ::setenv("TANDEM_SPEC_TEST_VAR", "a=b", 1);
  Environment env = captureEnvironment();
  ::unsetenv("TANDEM_SPEC_TEST_VAR");
  ASSERT_EQ(env.count("TANDEM_SPEC_TEST_VAR"), 1u);
  EXPECT_EQ(env.at("TANDEM_SPEC_TEST_VAR"), "a=b");  // split at the first '=' only
}

// --- no source ---

TEST(ResolveTest, NoSourceIsStandalone) {
  EXPECT_FALSE(resolveClusterSpec({}, {}).has_value());
  EXPECT_FALSE(resolveClusterSpec({}, {{"PATH", "/bin"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}).has_value());
  EXPECT_FALSE(resolveClusterSpec({}, {{"TF_CONFIG", ""}}).has_value());
  // srun's batch step sets SLURM_PROCID without SLURM_NTASKS.
  EXPECT_FALSE(resolveClusterSpec({}, {{"SLURM_PROCID", "0"}}).has_value());
}

TEST(ResolveTest, CoordinatorAloneIsRejected) {
  ClusterFlags flags;
  flags.coordinator = "h:1";
  expectRejected(flags, {}, {"--coordinator", "no cluster"});
}

// --- flags ---

TEST(FlagsTest, Worker) {
  ClusterFlags flags = workerFlags("10.0.0.1:2222,10.0.0.2:2222", "worker", 1);
  flags.ps_hosts = "10.0.0.9:2000";
  ClusterSpec spec = resolve(flags);
  EXPECT_EQ(spec.source, "flags");
  EXPECT_EQ(spec.role, Role::kWorker);
  EXPECT_EQ(spec.index, 1);
  EXPECT_EQ(spec.num_workers, 2);
  EXPECT_EQ(spec.numServers(), 1);
  ASSERT_EQ(spec.worker_hosts.size(), 2u);
  EXPECT_EQ(spec.worker_hosts[1], (HostPort{"10.0.0.2", 2222}));
  EXPECT_EQ(spec.ps_hosts[0], (HostPort{"10.0.0.9", 2000}));
  EXPECT_EQ(spec.coordinator, (HostPort{"10.0.0.1", 2222}));
  EXPECT_FALSE(spec.isChief());
  EXPECT_EQ(spec.taskName(), "worker 1");
}

TEST(FlagsTest, ChiefWithoutPsAndSpaces) {
  ClusterSpec spec = resolve(workerFlags("a:1, b:2", "worker", 0));
  EXPECT_TRUE(spec.isChief());
  EXPECT_EQ(spec.numServers(), 0);
  EXPECT_EQ(spec.worker_hosts[1], (HostPort{"b", 2}));
}

TEST(FlagsTest, Ps) {
  ClusterFlags flags = workerFlags("a:1", "ps", 1);
  flags.ps_hosts = "p:1,p:2";
  ClusterSpec spec = resolve(flags);
  EXPECT_EQ(spec.role, Role::kPs);
  EXPECT_EQ(spec.index, 1);
  EXPECT_EQ(spec.num_workers, 1);
  EXPECT_EQ(spec.numServers(), 2);
  EXPECT_EQ(spec.coordinator, (HostPort{"a", 1}));
  EXPECT_EQ(spec.taskName(), "ps 1");
}

TEST(FlagsTest, ExplicitCoordinatorWins) {
  ClusterFlags flags = workerFlags("a:1", "worker", 0);
  flags.coordinator = "c:9";
  EXPECT_EQ(resolve(flags).coordinator, (HostPort{"c", 9}));
  flags.coordinator = "c:nope";
  expectRejected(flags, {}, {"--coordinator", "c:nope"});
}

TEST(FlagsTest, MissingFlagsAreNamed) {
  ClusterFlags job_only;
  job_only.job_name = "worker";
  expectRejected(job_only, {}, {"--worker_hosts", "--job_name"});
  ClusterFlags ps_only;
  ps_only.ps_hosts = "p:1";
  expectRejected(ps_only, {}, {"--worker_hosts", "--ps_hosts"});
  ClusterFlags index_only;
  index_only.task_index = 0;
  expectRejected(index_only, {}, {"--worker_hosts", "--task_index"});
  expectRejected(workerFlags("a:1", "", 0), {}, {"--job_name"});
  expectRejected(workerFlags("a:1", "worker", -1), {}, {"--task_index"});
}

TEST(FlagsTest, BadJobName) { expectRejected(workerFlags("a:1", "chief", 0), {}, {"--job_name", "'chief'"}); }

TEST(FlagsTest, IndexOutOfRange) {
  expectRejected(workerFlags("a:1,b:1", "worker", 2), {}, {"--task_index", "2", "--worker_hosts"});
  ClusterFlags flags = workerFlags("a:1", "ps", 1);
  flags.ps_hosts = "p:1";
  expectRejected(flags, {}, {"--task_index", "1", "--ps_hosts"});
}

// A growing job's worker (--max-workers) may lie beyond the list, up to the maximum.
TEST(FlagsTest, AWorkerBeyondTheListJoinsAGrowingJobUpToMaxWorkers) {
  ClusterFlags flags = workerFlags("a:1,b:1", "worker", 3);
  flags.max_workers = 4;
  const ClusterSpec spec = resolve(flags);
  EXPECT_EQ(spec.num_workers, 2);
  EXPECT_EQ(spec.index, 3);
  EXPECT_TRUE(spec.beyondList());
  EXPECT_EQ(spec.coordinator, (HostPort{"a", 1}));
  EXPECT_FALSE(resolve(workerFlags("a:1,b:1", "worker", 1)).beyondList());
  flags.max_workers = 3;
  expectRejected(flags, {}, {"--task_index 3 is out of range: --worker_hosts lists 2 worker task(s) and --max-workers is 3"});
  // Servers never grow.
  ClusterFlags server = workerFlags("a:1", "ps", 2);
  server.ps_hosts = "p:1,q:1";
  server.max_workers = 8;
  expectRejected(server, {}, {"--task_index 2 is out of range: --ps_hosts lists 2 ps task(s)"});
}

TEST(FlagsTest, PsWithoutPsHosts) { expectRejected(workerFlags("a:1", "ps", 0), {}, {"--ps_hosts"}); }

TEST(FlagsTest, MalformedHostLists) {
  expectRejected(workerFlags("127.0.0.1:x", "worker", 0), {}, {"--worker_hosts", "'127.0.0.1:x'"});
  expectRejected(workerFlags("a:1,,b:2", "worker", 0), {}, {"--worker_hosts", "empty"});
  expectRejected(workerFlags("a:1,", "worker", 0), {}, {"--worker_hosts", "empty"});
  ClusterFlags flags = workerFlags("a:1", "worker", 0);
  flags.ps_hosts = "p:70000";
  expectRejected(flags, {}, {"--ps_hosts", "70000"});
}

TEST(FlagsTest, DuplicateAddress) {
  expectRejected(workerFlags("a:1,b:2,a:1", "worker", 0), {}, {"a:1", "twice", "worker 0", "worker 2"});
  ClusterFlags flags = workerFlags("a:1,b:2", "worker", 0);
  flags.ps_hosts = "b:2";
  expectRejected(flags, {}, {"b:2", "twice", "worker 1", "ps 0"});
}

TEST(FlagsTest, FlagsAndTfConfigConflict) {
  ClusterFlags flags = workerFlags("a:1", "worker", 0);
  expectRejected(flags, {{"TF_CONFIG", R"({"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":0}})"}},
                 {"--worker_hosts", "TF_CONFIG"});
}

TEST(FlagsTest, FlagsOverrideLaunchers) {
  ClusterSpec spec = resolve(workerFlags("a:1,b:1", "worker", 1),
                             {{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "m"}, {"MASTER_PORT", "5"}});
  EXPECT_EQ(spec.source, "flags");
  EXPECT_EQ(spec.index, 1);
}

// --- TF_CONFIG ---

// Found by fuzz_cluster_spec: a number JSON cannot hold escaped as a
// nlohmann out_of_range and killed the process instead of exiting 2.
TEST(TfConfigTest, ANumberTooLargeForJsonIsBadInput) {
  expectRejected({}, {{"TF_CONFIG", R"({"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":444e444}})"}},
                 {"TF_CONFIG", "not valid JSON", "overflow"});
}

TEST(TfConfigTest, WorkerWithChief) {
  Environment env{{"TF_CONFIG",
                   R"({"cluster":{"chief":["c:1"],"worker":["w:1","w:2"],"ps":["p:1"]},
                       "task":{"type":"worker","index":1}})"}};
  ClusterSpec spec = resolve({}, env);
  EXPECT_EQ(spec.source, "TF_CONFIG");
  EXPECT_EQ(spec.role, Role::kWorker);
  EXPECT_EQ(spec.index, 2);  // chief is rank 0
  EXPECT_EQ(spec.num_workers, 3);
  EXPECT_EQ(spec.worker_hosts, (std::vector<HostPort>{{"c", 1}, {"w", 1}, {"w", 2}}));
  EXPECT_EQ(spec.ps_hosts, (std::vector<HostPort>{{"p", 1}}));
  EXPECT_EQ(spec.coordinator, (HostPort{"c", 1}));
}

// An elastic program's worker beyond the list (launch --max-workers, which
// sets the flags' maximum from TANDEM_MAX_WORKERS).
TEST(TfConfigTest, AWorkerBeyondTheListJoinsAGrowingJobUpToMaxWorkers) {
  Environment env{{"TF_CONFIG", R"({"cluster":{"worker":["w:1","w:2"]},"task":{"type":"worker","index":2}})"}};
  ClusterFlags flags;
  flags.max_workers = 3;
  const ClusterSpec spec = resolve(flags, env);
  EXPECT_EQ(spec.num_workers, 2);
  EXPECT_EQ(spec.index, 2);
  EXPECT_TRUE(spec.beyondList());
  flags.max_workers = 2;
  expectRejected(flags, env, {"TF_CONFIG task.index: 2 is out of range: cluster.worker lists 2 task(s) and the job "
                              "grows to 2 workers"});
  expectRejected({}, env, {"TF_CONFIG task.index: 2 is out of range: cluster.worker lists 2 task(s)"});
  // A chief counts among the maximum: worker 1 is the job's third.
  Environment with_chief{
      {"TF_CONFIG", R"({"cluster":{"chief":["c:1"],"worker":["w:1"]},"task":{"type":"worker","index":1}})"}};
  flags.max_workers = 3;
  EXPECT_EQ(resolve(flags, with_chief).index, 2);
  flags.max_workers = 2;
  expectRejected(flags, with_chief, {"task.index: 1 is out of range"});
}

// TFJob's Evaluator replica: TF_CONFIG as its controller writes it (the
// evaluator is left out of cluster, "environment" is "cloud").
TEST(TfConfigTest, TheEvaluatorIsNoMemberOfTheCluster) {
  const std::string tf_config = R"({"cluster":{"chief":["j-chief-0.ns.svc:2222"],"ps":["j-ps-0.ns.svc:2222"],)"
                                R"("worker":["j-worker-0.ns.svc:2222"]},)"
                                R"("task":{"type":"evaluator","index":0},"environment":"cloud"})";
  const ClusterSpec spec = resolve({}, {{"TF_CONFIG", tf_config}});
  EXPECT_EQ(spec.role, Role::kEvaluator);
  EXPECT_EQ(spec.taskName(), "evaluator");
  EXPECT_EQ(spec.num_workers, 2);
  EXPECT_EQ(spec.numServers(), 1);
}

TEST(TfConfigTest, ChiefIsRankZero) {
  Environment env{{"TF_CONFIG", R"({"cluster":{"chief":["c:1"],"worker":["w:1"]},"task":{"type":"chief","index":0}})"}};
  ClusterSpec spec = resolve({}, env);
  EXPECT_TRUE(spec.isChief());
  EXPECT_EQ(spec.num_workers, 2);
}

TEST(TfConfigTest, WorkerWithoutChief) {
  Environment env{{"TF_CONFIG", R"({"cluster":{"worker":["w:1","w:2"]},"task":{"type":"worker","index":1}})"}};
  ClusterSpec spec = resolve({}, env);
  EXPECT_EQ(spec.index, 1);
  EXPECT_EQ(spec.num_workers, 2);
  EXPECT_EQ(spec.coordinator, (HostPort{"w", 1}));
}

TEST(TfConfigTest, MissingIndexDefaultsToZero) {
  Environment env{{"TF_CONFIG", R"({"cluster":{"worker":["w:1"]},"task":{"type":"worker"}})"}};
  EXPECT_EQ(resolve({}, env).index, 0);
}

TEST(TfConfigTest, PsTask) {
  Environment env{{"TF_CONFIG", R"({"cluster":{"worker":["w:1"],"ps":["p:1","p:2"]},"task":{"type":"ps","index":1}})"}};
  ClusterSpec spec = resolve({}, env);
  EXPECT_EQ(spec.role, Role::kPs);
  EXPECT_EQ(spec.index, 1);
  EXPECT_EQ(spec.numServers(), 2);
  EXPECT_EQ(spec.coordinator, (HostPort{"w", 1}));
}

TEST(TfConfigTest, CoordinatorFlagWins) {
  ClusterFlags flags;
  flags.coordinator = "k:7";
  Environment env{{"TF_CONFIG", R"({"cluster":{"worker":["w:1"]},"task":{"type":"worker","index":0}})"}};
  EXPECT_EQ(resolve(flags, env).coordinator, (HostPort{"k", 7}));
}

TEST(TfConfigTest, TakesPriorityOverLaunchers) {
  Environment env{{"TF_CONFIG", R"({"cluster":{"worker":["w:1"]},"task":{"type":"worker","index":0}})"},
                  {"OMPI_COMM_WORLD_RANK", "1"},
                  {"OMPI_COMM_WORLD_SIZE", "2"}};
  EXPECT_EQ(resolve({}, env).source, "TF_CONFIG");
}

void expectTfRejected(const std::string& json, const std::vector<std::string>& needles) {
  expectRejected({}, {{"TF_CONFIG", json}}, needles);
}

TEST(TfConfigTest, RejectsMalformed) {
  expectTfRejected("{not json", {"TF_CONFIG", "JSON", "parse"});
  expectTfRejected("[1]", {"TF_CONFIG", "object"});
  expectTfRejected(R"({"task":{"type":"worker","index":0}})", {"TF_CONFIG cluster"});
  expectTfRejected(R"({"cluster":{"worker":["w:1"]}})", {"TF_CONFIG task"});
  expectTfRejected(R"({"cluster":{"worker":["w:1"]},"task":{"index":0}})", {"TF_CONFIG task.type"});
  expectTfRejected(R"({"cluster":{"worker":["w:1"]},"task":{"type":"worker","index":"0"}})",
                   {"TF_CONFIG task.index"});
  expectTfRejected(R"({"cluster":{"worker":"w:1"},"task":{"type":"worker","index":0}})",
                   {"TF_CONFIG cluster.worker", "list"});
  expectTfRejected(R"({"cluster":{"worker":["w:1",5]},"task":{"type":"worker","index":0}})",
                   {"TF_CONFIG cluster.worker[1]"});
  expectTfRejected(R"({"cluster":{"worker":["w:1","w:x"]},"task":{"type":"worker","index":0}})",
                   {"TF_CONFIG cluster.worker[1]", "'w:x'"});
  expectTfRejected(R"({"cluster":{"worker":["w:1"],"ps":[""]},"task":{"type":"worker","index":0}})",
                   {"TF_CONFIG cluster.ps[0]", "empty"});
  expectTfRejected(R"({"cluster":{"worker":["w:1"],"foo":["f:1"]},"task":{"type":"worker","index":0}})",
                   {"TF_CONFIG cluster.foo"});
  expectTfRejected(R"({"cluster":{"chief":["c:1","c:2"]},"task":{"type":"chief","index":0}})",
                   {"TF_CONFIG cluster.chief", "one chief"});
  expectTfRejected(R"({"cluster":{"ps":["p:1"]},"task":{"type":"ps","index":0}})",
                   {"TF_CONFIG cluster", "worker"});
}

TEST(TfConfigTest, RejectsBadTask) {
  expectTfRejected(R"({"cluster":{"worker":["w:1"]},"task":{"type":"evaluator","index":1}})",
                   {"TF_CONFIG task.index", "evaluator", "index 0"});
  expectTfRejected(R"({"cluster":{"worker":["w:1"]},"task":{"type":"master","index":0}})",
                   {"TF_CONFIG task.type", "'master'"});
  expectTfRejected(R"({"cluster":{"worker":["w:1","w:2"]},"task":{"type":"worker","index":2}})",
                   {"TF_CONFIG task.index", "2", "cluster.worker", "2 task"});
  expectTfRejected(R"({"cluster":{"worker":["w:1"]},"task":{"type":"worker","index":-1}})",
                   {"TF_CONFIG task.index", "-1"});
  expectTfRejected(R"({"cluster":{"chief":["c:1"]},"task":{"type":"worker","index":0}})",
                   {"TF_CONFIG task.type", "cluster.worker"});
  expectTfRejected(R"({"cluster":{"worker":["w:1"]},"task":{"type":"ps","index":0}})",
                   {"TF_CONFIG task.type", "cluster.ps"});
  expectTfRejected(R"({"cluster":{"chief":["c:1"],"worker":["w:1"]},"task":{"type":"chief","index":1}})",
                   {"TF_CONFIG task.index", "cluster.chief"});
  expectTfRejected(R"({"cluster":{"chief":["w:1"],"worker":["w:1"]},"task":{"type":"chief","index":0}})",
                   {"TF_CONFIG cluster", "w:1", "twice"});
}

// --- launchers ---

TEST(LauncherTest, Mpirun) {
  ClusterFlags flags;
  flags.coordinator = "head:29500";
  ClusterSpec spec = resolve(flags, {{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  EXPECT_EQ(spec.source, "mpirun");
  EXPECT_EQ(spec.role, Role::kWorker);
  EXPECT_EQ(spec.index, 3);
  EXPECT_EQ(spec.num_workers, 4);
  EXPECT_TRUE(spec.worker_hosts.empty());
  EXPECT_TRUE(spec.ps_hosts.empty());
  EXPECT_EQ(spec.coordinator, (HostPort{"head", 29500}));
}

TEST(LauncherTest, MpirunCoordinatorFromMasterVars) {
  ClusterSpec spec = resolve({}, {{"OMPI_COMM_WORLD_RANK", "0"},
                                  {"OMPI_COMM_WORLD_SIZE", "2"},
                                  {"MASTER_ADDR", "m"},
                                  {"MASTER_PORT", "7"}});
  EXPECT_EQ(spec.coordinator, (HostPort{"m", 7}));
  EXPECT_TRUE(spec.isChief());
}

TEST(LauncherTest, MpirunNeedsCoordinator) {
  expectRejected({}, {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, {"--coordinator", "mpirun"});
  expectRejected({}, {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}},
                 {"MASTER_PORT"});
}

TEST(LauncherTest, Slurm) {
  ClusterFlags flags;
  flags.coordinator = "[fe80::1]:1234";
  ClusterSpec spec = resolve(flags, {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "8"}});
  EXPECT_EQ(spec.source, "slurm");
  EXPECT_EQ(spec.index, 1);
  EXPECT_EQ(spec.num_workers, 8);
  EXPECT_EQ(spec.coordinator, (HostPort{"fe80::1", 1234}));
  expectRejected({}, {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "8"}}, {"SLURM_STEP_NODELIST", "--coordinator"});
}

// srun tells every task the step's nodes and the job's id: enough for all
// of them to name the same coordinator, on the node task 0 runs on.
TEST(LauncherTest, SlurmFindsTheCoordinatorFromTheStepAlone) {
  const Environment step{{"SLURM_PROCID", "3"},          {"SLURM_NTASKS", "4"},
                         {"SLURM_STEP_NODELIST", "gpu[07-08],cpu3"}, {"SLURM_JOB_NODELIST", "gpu[01-09]"},
                         {"SLURM_JOB_ID", "123456"},    {"SLURM_STEP_ID", "1"}};
  ClusterSpec spec = resolve({}, step);
  EXPECT_EQ(spec.source, "slurm");
  EXPECT_EQ(spec.index, 3);
  EXPECT_EQ(spec.coordinator, (HostPort{"gpu07", kSlurmPortBase + 1456 * 10 + 1}));
  Environment batch = step;  // outside a step: the job's first node
  batch.erase("SLURM_STEP_NODELIST");
  batch.erase("SLURM_STEP_ID");
  EXPECT_EQ(resolve({}, batch).coordinator, (HostPort{"gpu01", kSlurmPortBase + 14560}));
  // Given ones win: MASTER_ADDR and MASTER_PORT, or --coordinator.
  Environment master = step;
  master["MASTER_ADDR"] = "m";
  master["MASTER_PORT"] = "7";
  EXPECT_EQ(resolve({}, master).coordinator, (HostPort{"m", 7}));
  ClusterFlags flags;
  flags.coordinator = "c:9";
  EXPECT_EQ(resolve(flags, step).coordinator, (HostPort{"c", 9}));
  // Two steps side by side in one job differ; ports stay under the ephemeral range.
  EXPECT_NE(slurmPort(123456, 0), slurmPort(123456, 1));
  EXPECT_EQ(slurmPort(0, 0), kSlurmPortBase);
  EXPECT_LT(slurmPort(1999, 9), 32768);
  Environment no_job = step;
  no_job.erase("SLURM_JOB_ID");
  expectRejected({}, no_job, {"SLURM_JOB_ID", "--coordinator"});
  Environment bad_job = step;
  bad_job["SLURM_JOB_ID"] = "12x";
  expectRejected({}, bad_job, {"SLURM_JOB_ID", "'12x'"});
  Environment bad_list = step;
  bad_list["SLURM_STEP_NODELIST"] = "gpu[07-";
  expectRejected({}, bad_list, {"SLURM_STEP_NODELIST", "'gpu[07-'", "never closes"});
}

// --ps K: the step's last K tasks serve, each on its own node's name and a
// port it publishes; the others are workers 0.., task 0 the coordinator's.
TEST(LauncherTest, SlurmPsMakesTheLastTasksServersThatPublishTheirAddresses) {
  Environment step{{"SLURM_PROCID", "0"},       {"SLURM_NTASKS", "5"},   {"SLURM_STEP_NODELIST", "n[1-2]"},
                   {"SLURM_JOB_ID", "7"},       {"SLURM_STEP_ID", "0"},  {"SLURMD_NODENAME", "n1"}};
  ClusterFlags flags;
  flags.ps_tasks = 2;
  ClusterSpec chief = resolve(flags, step);
  EXPECT_EQ(chief.role, Role::kWorker);
  EXPECT_EQ(chief.index, 0);
  EXPECT_EQ(chief.num_workers, 3);
  EXPECT_EQ(chief.numServers(), 2);
  EXPECT_TRUE(chief.servers_published);
  EXPECT_EQ(chief.ps_hosts, (std::vector<HostPort>(2))) << "a worker knows no server's address ahead";
  EXPECT_EQ(chief.coordinator, (HostPort{"n1", kSlurmPortBase + 70}));
  step["SLURM_PROCID"] = "2";
  EXPECT_EQ(resolve(flags, step).role, Role::kWorker);
  step["SLURM_PROCID"] = "4";
  step["SLURMD_NODENAME"] = "n2";
  ClusterSpec server = resolve(flags, step);
  EXPECT_EQ(server.role, Role::kPs);
  EXPECT_EQ(server.index, 1);
  EXPECT_EQ(server.taskName(), "ps 1");
  EXPECT_EQ(server.ps_hosts[1], (HostPort{"n2", 0})) << "its own node, and a port it picks";
  EXPECT_EQ(server.coordinator, chief.coordinator);
  // Too few tasks: both counts named. A one-task step is no standalone run with --ps.
  flags.ps_tasks = 5;
  expectRejected(flags, step, {"--ps 5", "SLURM_NTASKS is 5", "at least 6 tasks"});
  Environment one = step;
  one["SLURM_NTASKS"] = "1";
  one["SLURM_PROCID"] = "0";
  flags.ps_tasks = 1;
  expectRejected(flags, one, {"--ps 1", "SLURM_NTASKS is 1", "at least 2 tasks"});
  // Where a list names the servers, or nothing launched the task, --ps is refused.
  ClusterFlags listed = flags;
  listed.worker_hosts = "a:1";
  listed.job_name = "worker";
  listed.task_index = 0;
  expectRejected(listed, {}, {"--ps 1 applies under srun, mpirun or torchrun"});
  expectRejected(flags, {}, {"--ps 1", "none started this one", "tandem launch --ps 1"});
}

TEST(SlurmHostlist, ExpandsRangesPaddingAndSeveralBracketsInSlurmsOrder) {
  using V = std::vector<std::string>;
  EXPECT_EQ(expandHostlist("gpu[01-04,07],cpu3", "list"), (V{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu3"}));
  EXPECT_EQ(expandHostlist("node1", "list"), (V{"node1"}));
  EXPECT_EQ(expandHostlist("n[8-11]", "list"), (V{"n8", "n9", "n10", "n11"}));
  EXPECT_EQ(expandHostlist("n[098-101]-ib", "list"), (V{"n098-ib", "n099-ib", "n100-ib", "n101-ib"}));
  EXPECT_EQ(expandHostlist("r[1-2]n[1,3]", "list"), (V{"r1n1", "r1n3", "r2n1", "r2n3"}));
  EXPECT_EQ(expandHostlist("a,b[2],c", "list"), (V{"a", "b2", "c"}));
  EXPECT_EQ(expandHostlist("10.0.0.[1-2]", "list"), (V{"10.0.0.1", "10.0.0.2"}));
}

TEST(SlurmHostlist, ABadListIsAnInputErrorNamingTheListAndWhy) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "empty name"},        {"a,,b", "empty name"},        {"gpu[01-", "never closes"},
      {"gpu]1[", "never opened"}, {"gpu[4-2]", "runs backwards"}, {"gpu[a-b]", "not a number"},
      {"gpu[]", "not a number"},  {"g[[1]]", "nests"},           {"a b", "space"},
      {"n[0-9999999]", "more than"}};
  for (const auto& [list, why] : bad) {
    try {
      expandHostlist(list, "SLURM_STEP_NODELIST");
      ADD_FAILURE() << "'" << list << "' parsed";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("SLURM_STEP_NODELIST: host list '" + list + "'"), std::string::npos) << what;
      EXPECT_NE(what.find(why), std::string::npos) << what;
    }
  }
}

TEST(LauncherTest, Torchrun) {
  ClusterSpec spec =
      resolve({}, {{"RANK", "2"}, {"WORLD_SIZE", "3"}, {"MASTER_ADDR", "10.1.1.1"}, {"MASTER_PORT", "29500"}});
  EXPECT_EQ(spec.source, "torchrun");
  EXPECT_EQ(spec.index, 2);
  EXPECT_EQ(spec.num_workers, 3);
  EXPECT_TRUE(spec.worker_hosts.empty());
  EXPECT_EQ(spec.coordinator, (HostPort{"10.1.1.1", 29500}));
}

TEST(LauncherTest, TorchrunNeedsMaster) {
  expectRejected({}, {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}, {"MASTER_ADDR"});
  expectRejected({}, {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}}, {"MASTER_PORT"});
  expectRejected({}, {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}, {"MASTER_PORT", "99999"}},
                 {"MASTER_PORT", "99999"});
  expectRejected({}, {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", ""}, {"MASTER_PORT", "1"}},
                 {"MASTER_ADDR"});
}

// torchrun's agent holds MASTER_PORT with its own store; ours must not collide.
TEST(LauncherTest, TorchrunAgentStoreMovesCoordinatorToNextPort) {
  Environment env{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"},
                  {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
  EXPECT_EQ(resolve({}, env).coordinator, (HostPort{"127.0.0.1", 29501}));
  env["MASTER_PORT"] = "65535";
  expectRejected({}, env, {"MASTER_PORT", "65535", "+ 1"});
  ClusterFlags flags;
  flags.coordinator = "h:7";
  EXPECT_EQ(resolve(flags, env).coordinator, (HostPort{"h", 7}));
}

TEST(LauncherTest, WorldOfOneNeedsNoCoordinator) {
  EXPECT_FALSE(resolveClusterSpec({}, {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}}));
  EXPECT_FALSE(resolveClusterSpec({}, {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}));
  EXPECT_FALSE(resolveClusterSpec({}, {{"RANK", "0"}, {"WORLD_SIZE", "1"}}));
  // An explicit coordinator still makes it a one-worker cluster.
  ClusterFlags flags;
  flags.coordinator = "127.0.0.1:5";
  auto spec = resolveClusterSpec(flags, {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}});
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->num_workers, 1);
  // Bad values are still bad with one task.
  expectRejected({}, {{"RANK", "1"}, {"WORLD_SIZE", "1"}}, {"RANK", "out of range"});
}

TEST(LauncherTest, Priority) {
  Environment torchrun{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}, {"MASTER_PORT", "1"}};
  Environment mpi_and_torch = torchrun;
  mpi_and_torch["OMPI_COMM_WORLD_RANK"] = "1";
  mpi_and_torch["OMPI_COMM_WORLD_SIZE"] = "2";
  ClusterSpec spec = resolve({}, mpi_and_torch);
  EXPECT_EQ(spec.source, "mpirun");
  EXPECT_EQ(spec.index, 1);

  Environment slurm_and_torch = torchrun;
  slurm_and_torch["SLURM_PROCID"] = "1";
  slurm_and_torch["SLURM_NTASKS"] = "2";
  EXPECT_EQ(resolve({}, slurm_and_torch).source, "slurm");

  Environment all = mpi_and_torch;
  all["SLURM_PROCID"] = "0";
  all["SLURM_NTASKS"] = "2";
  EXPECT_EQ(resolve({}, all).source, "mpirun");
}

TEST(LauncherTest, RejectsBadRankAndSize) {
  auto torch = [](const std::string& rank, const std::string& size) {
    return Environment{{"RANK", rank}, {"WORLD_SIZE", size}, {"MASTER_ADDR", "m"}, {"MASTER_PORT", "1"}};
  };
  expectRejected({}, torch("2", "2"), {"RANK", "2", "WORLD_SIZE"});
  expectRejected({}, torch("-1", "2"), {"RANK", "negative"});
  expectRejected({}, torch("0", "0"), {"WORLD_SIZE", ">= 1"});
  expectRejected({}, torch("x", "2"), {"RANK", "'x'", "integer"});
  expectRejected({}, torch("1", "2.5"), {"WORLD_SIZE", "'2.5'"});
  expectRejected({}, torch("1", "99999999999"), {"WORLD_SIZE", "integer"});
  expectRejected({}, {{"RANK", "0"}}, {"RANK", "WORLD_SIZE"});
  expectRejected({}, {{"WORLD_SIZE", "2"}}, {"RANK", "WORLD_SIZE"});

  Environment mpi{{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"MASTER_ADDR", "m"},
                  {"MASTER_PORT", "1"}};
  expectRejected({}, mpi, {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"});
  expectRejected({}, {{"OMPI_COMM_WORLD_RANK", "0"}}, {"OMPI_COMM_WORLD_SIZE"});

  ClusterFlags flags;
  flags.coordinator = "h:1";
  expectRejected(flags, {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "zero"}}, {"SLURM_NTASKS", "'zero'"});
  expectRejected(flags, {{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "2"}}, {"SLURM_PROCID", "5", "SLURM_NTASKS"});
}

}  // namespace
}  // namespace tandem::cluster
