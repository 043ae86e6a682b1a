// The lab's report from a worker's window and the host links' counters:
// where a link-bound step went, in the emulated cluster's time.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "lab/lab_report.hpp"
#include "plan/comm_model.hpp"

namespace tandem::lab {
namespace {

// 4 hosts x 2 workers, flat sync PS with a server on each host, 100 Mbit/s
// links at dilation 4: the emulated step is 200 ms, 800 ms on this clock.
LabSetup flatFourByTwo() {
  LabSetup s;
  s.worker_hosts = 4;
  s.workers_per_host = 2;
  s.servers = 4;
  s.link_bits_per_s = 100e6;
  s.dilation = 4;
  s.forward_s = 0.010;
  s.backward_s = 0.020;
  s.model_bytes = 1.08e6;
  s.group_bytes = 16.9e3;
  s.mode = Mode::PsSync;
  return s;
}

TEST(LabReport, SaysHowBusyTheBusiestWorkerLinkWasAndHowMuchOfItWasTheOptimumsBytes) {
  const LabSetup setup = flatFourByTwo();
  const int64_t steps = 10;
  const StepWindow window{.begin_time = 1000.0, .end_time = 1000.0 + 0.8 * steps, .steps = steps, .breakdown = nlohmann::json::object()};
  const std::vector<WorkerResult> workers = {{"worker 0", window, 64}};
  // Host 2 receives most: 2.25 MB a step, 90% of 200 ms at 100 Mbit/s.
  const std::vector<LinkCounters> begin = {{5, 7}, {0, 0}, {100, 0}, {0, 0}};
  std::vector<LinkCounters> end = begin;
  end[0].sent_bytes += 2'000'000 * steps;
  end[1].received_bytes += 1'500'000 * steps;
  end[2].received_bytes += 2'250'000 * steps;
  end[3].sent_bytes += 10;

  const nlohmann::json report = labReport(setup, workers, begin, end);
  EXPECT_NEAR(report["measured"]["step_ms"].get<double>(), 200.0, 1e-9);
  EXPECT_NEAR(report["measured"]["busiest_worker_link_bytes_per_step"].get<double>(), 2.25e6, 1e-6);
  EXPECT_NEAR(report["measured"]["busiest_worker_link_busy"].get<double>(), 0.9, 1e-12);

  const plan::Prediction optimum = plan::predict({0.010, 0.020, 1.08e6, 64}, {4, 2, 100e6 / 8, 0},
                                                 {plan::Algorithm::kPsColocated, 4});
  ASSERT_EQ(optimum.bottleneck, "worker links");
  const double share = optimum.load.worker_host_bytes / 2.25e6;
  EXPECT_NEAR(report["ratios"]["optimum_bytes_over_link_bytes"].get<double>(), share, 1e-12);
  // Link-bound, the parts add up to optimum/measured: the forward it cannot
  // overlap, and the link's busy time that carried its bytes.
  EXPECT_NEAR(report["ratios"]["optimum_over_measured_step"].get<double>(), 10.0 / 200 + 0.9 * share, 1e-9);

  const std::string table = labTable(report);
  EXPECT_NE(table.find(fmt::format("where it went: that link sent 90.0% of the step, {:.1f}% of it the optimum's",
                                   100 * share)),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("the forward the optimum does not overlap is 5.0%"), std::string::npos) << table;
}

TEST(LabReport, SaysNothingOfTheLinkWhereComputeBinds) {
  LabSetup setup = flatFourByTwo();
  setup.backward_s = 2.0;  // far longer than the exchange
  const StepWindow window{.begin_time = 0, .end_time = 4 * 2.2 * 5, .steps = 5, .breakdown = nlohmann::json::object()};
  const std::vector<LinkCounters> begin(4, LinkCounters{0, 0});
  const std::vector<LinkCounters> end(4, LinkCounters{1'000'000 * 5, 1'000'000 * 5});
  const nlohmann::json report = labReport(setup, {{"worker 0", window, 64}}, begin, end);
  EXPECT_EQ(report["optimum"]["bottleneck"], "compute");
  EXPECT_NEAR(report["measured"]["busiest_worker_link_busy"].get<double>(), 1e6 * 8 / (100e6 * 2.2), 1e-12);
  EXPECT_EQ(labTable(report).find("where it went"), std::string::npos);
}

}  // namespace
}  // namespace tandem::lab
