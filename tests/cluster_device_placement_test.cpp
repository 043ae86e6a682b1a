#include "cluster/device_placement.hpp"

#include <gtest/gtest.h>

#include "support/expect_input_error.hpp"

namespace tandem::cluster {
namespace {

using tandem::testing::expectInputError;
using RequestKind = DeviceRequest::Kind;

ClusterSpec workerSpec(const std::string& workers, int index) {
  ClusterFlags flags;
  flags.worker_hosts = workers;
  flags.ps_hosts = "a:9";
  flags.job_name = "worker";
  flags.task_index = index;
  return resolveClusterSpec(flags, {}).value();
}

TEST(DeviceRequestTest, ParsesEverySpelling) {
  EXPECT_EQ(parseDeviceRequest("auto").kind, RequestKind::kAuto);
  EXPECT_EQ(parseDeviceRequest("cpu").kind, RequestKind::kCpu);
  EXPECT_EQ(parseDeviceRequest("cuda").kind, RequestKind::kCuda);
  EXPECT_FALSE(parseDeviceRequest("cuda").index.has_value());
  EXPECT_EQ(parseDeviceRequest("cuda:3").index, 3);
  EXPECT_EQ(parseDeviceRequest("cuda:3").text, "cuda:3");
}

TEST(DeviceRequestTest, RejectsWhatIsNotADeviceNamingTheFlag) {
  for (const char* bad : {"gpu", "CUDA", "cuda:", "cuda:-1", "cuda:x", "cuda:1.5", "cpu:0", ""}) {
    expectInputError([&] { parseDeviceRequest(bad); }, {"--device"});
  }
}

TEST(LocalRankTest, ListedHostsGiveTheIndexAmongTheHostsWorkers) {
  // Workers 0 and 2 on a, 1 on b: worker 2 is a's second.
  const LocalRank second = findLocalRank(workerSpec("a:1,b:1,a:2", 2), {});
  EXPECT_EQ(second.rank, 1);
  EXPECT_EQ(second.count, 2);
  EXPECT_EQ(findLocalRank(workerSpec("a:1,b:1,a:2", 1), {}).rank, 0);
  // Listed hosts win over a launcher's variables.
  EXPECT_EQ(findLocalRank(workerSpec("a:1,b:1,a:2", 2), {{"LOCAL_RANK", "5"}}).rank, 1);
}

TEST(LocalRankTest, LauncherVariables) {
  EXPECT_EQ(findLocalRank(std::nullopt, {}).rank, 0);
  EXPECT_EQ(findLocalRank(std::nullopt, {}).count, 1);
  const LocalRank torchrun = findLocalRank(std::nullopt, {{"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "4"}});
  EXPECT_EQ(torchrun.rank, 3);
  EXPECT_EQ(torchrun.count, 4);
  EXPECT_EQ(torchrun.source, "LOCAL_RANK");
  EXPECT_EQ(findLocalRank(std::nullopt, {{"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}})
                .rank,
            1);
  EXPECT_EQ(findLocalRank(std::nullopt, {{"SLURM_LOCALID", "2"}, {"SLURM_NTASKS_PER_NODE", "4"}}).rank, 2);
  expectInputError([] { findLocalRank(std::nullopt, {{"LOCAL_RANK", "4"}, {"LOCAL_WORLD_SIZE", "4"}}); },
                   {"LOCAL_RANK=4"});
  expectInputError([] { findLocalRank(std::nullopt, {{"LOCAL_RANK", "one"}, {"LOCAL_WORLD_SIZE", "4"}}); },
                   {"LOCAL_RANK=one"});
}

TEST(PlaceDeviceTest, AutoIsTheCpuWithoutAGpuAndSaysWhy) {
  const DevicePlacement p = placeDevice(parseDeviceRequest("auto"), 0, {}, "no GPU driver");
  EXPECT_FALSE(p.cuda);
  EXPECT_EQ(p.text(), "cpu");
  EXPECT_NE(p.reason.find("no GPU driver"), std::string::npos) << p.reason;
}

TEST(PlaceDeviceTest, CudaWithoutAGpuIsAnError) {
  expectInputError([] { placeDevice(parseDeviceRequest("cuda"), 0, {}, "CUDA_VISIBLE_DEVICES="); },
                   {"CUDA_VISIBLE_DEVICES="});
  expectInputError([] { placeDevice(parseDeviceRequest("cuda:0"), 0, {}, "no driver"); }, {"no GPU is visible"});
}

TEST(PlaceDeviceTest, EachLocalWorkerTakesItsOwnGpu) {
  for (int rank = 0; rank < 4; ++rank) {
    const DevicePlacement p = placeDevice(parseDeviceRequest("auto"), 4, {rank, 4, "LOCAL_RANK"}, "");
    EXPECT_TRUE(p.cuda);
    EXPECT_EQ(p.index, rank);
    EXPECT_EQ(p.text(), "cuda:" + std::to_string(rank));
    EXPECT_EQ(placeDevice(parseDeviceRequest("cuda"), 4, {rank, 4, "LOCAL_RANK"}, "").index, rank);
  }
  EXPECT_TRUE(placeDevice(parseDeviceRequest("cpu"), 4, {1, 4, "LOCAL_RANK"}, "").text() == "cpu");
}

TEST(PlaceDeviceTest, TwoWorkersNeverShareAGpuUnlessNamed) {
  // Four workers, two GPUs: the third has none of its own, under auto too.
  for (const char* request : {"auto", "cuda"}) {
    expectInputError([&] { placeDevice(parseDeviceRequest(request), 2, {2, 4, "flags"}, ""); },
                     {"local rank 2 has none of its own", "--allow-shared-gpu"});
  }
  // Asked for, ranks wrap around the GPUs.
  for (int rank = 0; rank < 4; ++rank) {
    const DevicePlacement p = placeDevice(parseDeviceRequest("cuda"), 2, {rank, 4, "flags"}, "", true);
    EXPECT_EQ(p.index, rank % 2);
  }
  // Named, a GPU is chosen on purpose.
  EXPECT_EQ(placeDevice(parseDeviceRequest("cuda:1"), 2, {3, 4, "flags"}, "").index, 1);
  expectInputError([] { placeDevice(parseDeviceRequest("cuda:2"), 2, {}, ""); }, {"cuda:0 to cuda:1"});
}

}  // namespace
}  // namespace tandem::cluster
