#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <thread>

#include "cluster/membership.hpp"
#include "core/error.hpp"
#include "support/test_security.hpp"

namespace tandem::cluster {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

ClusterSpec specFor(int port, int workers, int servers, Role role, int index) {
  ClusterSpec spec;
  spec.num_workers = workers;
  for (int i = 0; i < servers; ++i) spec.ps_hosts.push_back({"127.0.0.1", 7000 + i});
  spec.role = role;
  spec.index = index;
  spec.coordinator = {"127.0.0.1", port};
  spec.source = "flags";
  return spec;
}

json baseFingerprint() {
  return {{"batch_size", 64},
          {"mode", "sync"},
          {"model", {{"name", "mlp"}, {"params", {{"fc1.weight", {784, 128}}, {"fc1.bias", {128}}}}}}};
}

struct Outcome {
  std::exception_ptr error;
  std::chrono::milliseconds took{};
};

// Runs one joinCluster per task on its own thread and client, all under one
// deadline, and returns how each ended.
std::vector<Outcome> joinAll(int port, int workers, int servers, bool include_ps,
                             const std::vector<std::pair<Role, int>>& tasks,
                             const std::function<json(Role, int)>& fingerprint, std::chrono::milliseconds budget,
                             const std::string& generation = "train") {
  std::vector<Outcome> outcomes(tasks.size());
  std::vector<std::thread> threads;
  auto deadline = Deadline::after(budget);
  auto start = Clock::now();
  for (size_t t = 0; t < tasks.size(); ++t) {
    threads.emplace_back([&, t] {
      auto [role, index] = tasks[t];
      try {
        CoordinatorClient client({"127.0.0.1", port}, 5000ms, tandem::testing::testSecurity());
        joinCluster(client, specFor(port, workers, servers, role, index), fingerprint(role, index), deadline,
                    include_ps, generation);
      } catch (...) {
        outcomes[t].error = std::current_exception();
      }
      outcomes[t].took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    });
  }
  for (auto& th : threads) th.join();
  return outcomes;
}

std::string messageOf(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  }
}

template <class E>
bool isA(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
}

TEST(Membership, AllTasksJoin) {
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  auto outcomes = joinAll(server.port(), 3, 0, false, {{Role::kWorker, 0}, {Role::kWorker, 1}, {Role::kWorker, 2}},
                          [](Role, int) { return baseFingerprint(); }, 3000ms);
  for (auto& o : outcomes) {
    if (o.error) FAIL() << messageOf(o.error);
  }
}

TEST(Membership, WorkersAndServersJoin) {
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  auto outcomes = joinAll(server.port(), 2, 2, true,
                          {{Role::kPs, 1}, {Role::kWorker, 0}, {Role::kPs, 0}, {Role::kWorker, 1}},
                          [](Role, int) { return baseFingerprint(); }, 3000ms);
  for (auto& o : outcomes) {
    if (o.error) FAIL() << messageOf(o.error);
  }
}

TEST(Membership, MissingTaskFailsEveryPresentTaskNamingIt) {
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  auto outcomes = joinAll(server.port(), 3, 0, false, {{Role::kWorker, 0}, {Role::kWorker, 1}},
                          [](Role, int) { return baseFingerprint(); }, 400ms);
  for (auto& o : outcomes) {
    ASSERT_TRUE(o.error);
    EXPECT_TRUE(isA<PeerError>(o.error)) << messageOf(o.error);
    // The budget is printed as rounded time left at entry, 400ms unless
    // thread start-up took more than 5 ms.
    EXPECT_TRUE(messageOf(o.error).starts_with("rendezvous timed out after ")) << messageOf(o.error);
    EXPECT_TRUE(messageOf(o.error).ends_with("ms: worker 2 never arrived (joined: worker 0, worker 1)"))
        << messageOf(o.error);
    EXPECT_GE(o.took, 350ms);
    EXPECT_LT(o.took, 1000ms);
  }
}

TEST(Membership, MissingServersAreNamedToo) {
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  auto outcomes = joinAll(server.port(), 3, 2, true, {{Role::kWorker, 0}, {Role::kWorker, 1}, {Role::kPs, 1}},
                          [](Role, int) { return baseFingerprint(); }, 300ms);
  for (auto& o : outcomes) {
    ASSERT_TRUE(o.error);
    EXPECT_TRUE(
        messageOf(o.error).ends_with("ms: worker 2, ps 0 never arrived (joined: worker 0, worker 1, ps 1)"))
        << messageOf(o.error);
  }
}

TEST(Membership, MismatchFailsEveryTaskNamingFieldAndValues) {
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  auto outcomes = joinAll(server.port(), 3, 0, false, {{Role::kWorker, 0}, {Role::kWorker, 1}, {Role::kWorker, 2}},
                          [](Role, int index) {
                            json fp = baseFingerprint();
                            if (index == 1) fp["batch_size"] = 32;
                            return fp;
                          },
                          3000ms);
  for (auto& o : outcomes) {
    ASSERT_TRUE(o.error);
    EXPECT_TRUE(isA<InputError>(o.error)) << messageOf(o.error);
    EXPECT_EQ(messageOf(o.error), "fingerprint mismatch: worker 1 differs from worker 0 in batch_size: 32 vs 64");
  }
}

// The chief hosts the store in a real job, and its failure ends the store:
// it fails only once every other task has compared the fingerprints, so
// that they too name the mismatch instead of a vanished coordinator.
TEST(Membership, TheChiefFailsAMismatchOnlyAfterEveryOtherTaskCompared) {
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  const int port = server.port();
  std::vector<std::string> missing_when_chief_failed;
  std::thread chief([&] {
    CoordinatorClient client({"127.0.0.1", port}, 5000ms, tandem::testing::testSecurity());
    try {
      joinCluster(client, specFor(port, 3, 0, Role::kWorker, 0), baseFingerprint(), Deadline::after(5000ms));
    } catch (const InputError&) {
      CoordinatorClient look({"127.0.0.1", port}, 5000ms, tandem::testing::testSecurity());
      missing_when_chief_failed = look.missingKeys(
          {comparedKey(joinKey("train", Role::kWorker, 1)), comparedKey(joinKey("train", Role::kWorker, 2))},
          Deadline::after(2000ms));
      return;
    }
    ADD_FAILURE() << "the chief joined despite the mismatch";
  });
  auto others = joinAll(port, 3, 0, false, {{Role::kWorker, 1}, {Role::kWorker, 2}},
                        [](Role, int index) {
                          json fp = baseFingerprint();
                          if (index == 2) fp["batch_size"] = 32;
                          return fp;
                        },
                        5000ms);
  chief.join();
  EXPECT_TRUE(missing_when_chief_failed.empty()) << "not yet compared: " << missing_when_chief_failed.size();
  for (auto& o : others) {
    ASSERT_TRUE(o.error);
    EXPECT_EQ(messageOf(o.error), "fingerprint mismatch: worker 2 differs from worker 0 in batch_size: 32 vs 64");
  }
}

TEST(Membership, NestedMismatchNamesTheFieldPath) {
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  auto outcomes = joinAll(server.port(), 2, 0, false, {{Role::kWorker, 0}, {Role::kWorker, 1}},
                          [](Role, int index) {
                            json fp = baseFingerprint();
                            if (index == 1) fp["model"]["params"]["fc1.weight"] = {784, 256};
                            return fp;
                          },
                          3000ms);
  for (auto& o : outcomes) {
    ASSERT_TRUE(o.error);
    EXPECT_EQ(messageOf(o.error),
              "fingerprint mismatch: worker 1 differs from worker 0 in model.params.fc1.weight: [784,256] vs "
              "[784,128]");
  }
}

TEST(Membership, GenerationsAreSeparate) {
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  auto first = joinAll(server.port(), 2, 0, false, {{Role::kWorker, 0}, {Role::kWorker, 1}},
                       [](Role, int) { return baseFingerprint(); }, 3000ms, "gen1");
  for (auto& o : first) EXPECT_FALSE(o.error);
  // A new generation with a different (but agreed) fingerprint is not
  // confused with the old keys, and a missing task is not hidden by them.
  auto second = joinAll(server.port(), 2, 0, false, {{Role::kWorker, 0}},
                        [](Role, int) { return json{{"batch_size", 8}}; }, 300ms, "gen2");
  ASSERT_TRUE(second[0].error);
  EXPECT_NE(messageOf(second[0].error).find("worker 1 never arrived"), std::string::npos);
}

TEST(Membership, UnreachableCoordinatorIsNamed) {
  int port;
  {
    CoordinatorServer probe("127.0.0.1", 0, tandem::testing::testSecurity());
    port = probe.port();
  }
  CoordinatorClient client({"127.0.0.1", port}, 5000ms, tandem::testing::testSecurity());
  auto start = Clock::now();
  try {
    joinCluster(client, specFor(port, 2, 0, Role::kWorker, 1), baseFingerprint(), Deadline::after(300ms));
    FAIL() << "no throw";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("coordinator (worker 0) at 127.0.0.1:{} did not answer", port)),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(Clock::now() - start, 1000ms);  // the join deadline bounds it, not the client's 5 s
}

TEST(FingerprintDifference, EqualIsEmpty) {
  EXPECT_EQ(describeFingerprintDifference(baseFingerprint(), baseFingerprint()), "");
  EXPECT_EQ(describeFingerprintDifference(json::object(), json::object()), "");
}

TEST(FingerprintDifference, NamesValuesInOrder) {
  json a = baseFingerprint();
  json b = baseFingerprint();
  b["mode"] = "async";
  EXPECT_EQ(describeFingerprintDifference(a, b), R"(mode: "sync" vs "async")");
  EXPECT_EQ(describeFingerprintDifference(b, a), R"(mode: "async" vs "sync")");
}

TEST(FingerprintDifference, MissingOnEitherSide) {
  json a = baseFingerprint();
  json b = baseFingerprint();
  b["optimizer"] = "sgd";
  EXPECT_EQ(describeFingerprintDifference(a, b), R"(optimizer: (missing) vs "sgd")");
  EXPECT_EQ(describeFingerprintDifference(b, a), R"(optimizer: "sgd" vs (missing))");
  b = baseFingerprint();
  b["model"]["params"].erase("fc1.bias");
  EXPECT_EQ(describeFingerprintDifference(a, b), "model.params.fc1.bias: [128] vs (missing)");
}

// Where a thing lives (a model file's path) may differ between hosts: it
// is never compared, but a real difference names it on both sides.
TEST(FingerprintDifference, AboutIsShownNotCompared) {
  json a = {{"model", "torchscript 01"}, {"about", {{"model", "/w0/net.pt"}}}};
  json b = {{"model", "torchscript 01"}, {"about", {{"model", "/w1/net.pt"}}}};
  EXPECT_EQ(describeFingerprintDifference(a, b), "");
  b["model"] = "torchscript 02";
  EXPECT_EQ(describeFingerprintDifference(a, b),
            R"(model: "torchscript 01" vs "torchscript 02"; model given: "/w0/net.pt" vs "/w1/net.pt")");
  b["about"]["model"] = "/w0/net.pt";
  EXPECT_EQ(describeFingerprintDifference(a, b), R"(model: "torchscript 01" vs "torchscript 02")");
}

TEST(FingerprintDifference, FirstDifferenceInFieldOrder) {
  json a = {{"a", 1}, {"b", {{"c", 1}}}, {"z", 1}};
  json b = {{"a", 1}, {"b", {{"c", 2}}}, {"z", 2}};
  EXPECT_EQ(describeFingerprintDifference(a, b), "b.c: 1 vs 2");
}

TEST(FingerprintDifference, TypesAndArraysOfObjects) {
  EXPECT_EQ(describeFingerprintDifference(json{{"n", 32}}, json{{"n", "32"}}), R"(n: 32 vs "32")");
  json a = {{"layers", {{{"name", "fc1"}}, {{"name", "fc2"}}}}};
  json b = {{"layers", {{{"name", "fc1"}}, {{"name", "conv"}}}}};
  EXPECT_EQ(describeFingerprintDifference(a, b), R"(layers[1].name: "fc2" vs "conv")");
  EXPECT_EQ(describeFingerprintDifference(json{{"s", {1, 2}}}, json{{"s", {1, 2, 3}}}), "s: [1,2] vs [1,2,3]");
  EXPECT_EQ(describeFingerprintDifference(json(1), json(2)), "fingerprint: 1 vs 2");
}

TEST(FingerprintDifference, LongValuesAreShortened) {
  json a = {{"v", std::string(500, 'a')}};
  json b = {{"v", "b"}};
  auto d = describeFingerprintDifference(a, b);
  EXPECT_LT(d.size(), 120u);
  EXPECT_NE(d.find("..."), std::string::npos);
}

}  // namespace
}  // namespace tandem::cluster
