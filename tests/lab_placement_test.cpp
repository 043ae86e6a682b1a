// Where the lab puts its tasks, and how it reads a worker's steady steps.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "lab/placement.hpp"
#include "lab/step_window.hpp"

namespace tandem::lab {
namespace {

std::string addressOf(int host) { return "10.77.0." + std::to_string(host + 1); }

TEST(LabPlacement, WorkersFillHostsInOrderAndColocatedServersTakeEachHostsFirstPort) {
  const Placement p = place({3, 2, 2, false});
  EXPECT_EQ(p.hosts, 3);
  ASSERT_EQ(p.workers.size(), 6u);
  EXPECT_EQ(p.workers[0].host, 0);
  EXPECT_EQ(p.workers[1].host, 0);
  EXPECT_EQ(p.workers[5].host, 2);
  EXPECT_EQ(hostList(p.servers, addressOf), "10.77.0.1:2222,10.77.0.2:2222");
  EXPECT_EQ(hostList(p.workers, addressOf),
            "10.77.0.1:2223,10.77.0.1:2224,10.77.0.2:2223,10.77.0.2:2224,10.77.0.3:2222,10.77.0.3:2223");
}

TEST(LabPlacement, DedicatedServersGetHostsOfTheirOwnAfterTheWorkerHosts) {
  const Placement p = place({2, 1, 3, true});
  EXPECT_EQ(p.hosts, 5);
  EXPECT_EQ(hostList(p.servers, addressOf), "10.77.0.3:2222,10.77.0.4:2222,10.77.0.5:2222");
  EXPECT_EQ(hostList(p.workers, addressOf), "10.77.0.1:2222,10.77.0.2:2222");
}

TEST(LabPlacement, LayoutsThatCannotBePlacedNameTheFlag) {
  EXPECT_THROW(place({0, 1, 0, false}), InputError);
  EXPECT_THROW(place({2, 0, 0, false}), InputError);
  try {
    place({2, 1, 3, false});
    FAIL() << "3 colocated servers on 2 hosts were placed";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--ps-placement dedicated"), std::string::npos) << e.what();
  }
}

TEST(LabStepWindow, DifferencesTheCumulativeMeansAfterTheWarmUp) {
  const auto path = std::filesystem::temp_directory_path() / "tandem_lab_window_test.jsonl";
  {
    std::ofstream out(path);
    out << R"({"type":"resume","step":0})" << "\n";
    // Steps of 1 s, then of 0.5 s (0.25 of it exposed comm) from step 3 on.
    out << R"({"type":"train","step":1,"worker_step":1,"time":100.0,"step_breakdown":{"step":1.0,"exposed_comm":0.0}})" << "\n";
    out << R"({"type":"train","step":2,"worker_step":2,"time":101.0,"step_breakdown":{"step":1.0,"exposed_comm":0.0}})" << "\n";
    out << R"({"type":"train","step":3,"worker_step":3,"time":101.5,"step_breakdown":{"step":0.8333333333333334,"exposed_comm":0.08333333333333333}})" << "\n";
    out << R"({"type":"train","step":4,"worker_step":4,"time":102.0,"step_breakdown":{"step":0.75,"exposed_comm":0.125}})" << "\n";
    out << R"({"type":"eval","step":4,"time":105.0})" << "\n";
  }
  const StepWindow w = steadyWindow(path, 2);
  EXPECT_EQ(w.steps, 2);
  EXPECT_DOUBLE_EQ(w.stepSeconds(), 0.5);
  EXPECT_NEAR(w.breakdown["step"].get<double>(), 0.5, 1e-12);
  EXPECT_NEAR(w.breakdown["exposed_comm"].get<double>(), 0.25, 1e-12);
  // --measure-steps 1: steps 2 to 3 only (one 0.5 s step).
  const StepWindow one = steadyWindow(path, 2, 1);
  EXPECT_EQ(one.steps, 1);
  EXPECT_DOUBLE_EQ(one.end_time, 101.5);
  EXPECT_NEAR(one.breakdown["exposed_comm"].get<double>(), 0.25, 1e-12);
  // Too short a run to measure after the warm-up.
  EXPECT_THROW(steadyWindow(path, 4), InputError);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace tandem::lab
