// NCCL without a GPU: its unique id through the store, the library LibTorch's
// CUDA build brings (the venv's nvidia-nccl wheel) loading, and a join that
// cannot work here failing by name at once. Sums on GPUs run in
// bench/gpu/check.sh.
#include <gtest/gtest.h>
#include <dlfcn.h>
#include <link.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <string>

#include "cluster/kv_store.hpp"
#include "collective/nccl_communicator.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "support/gpu_driver.hpp"

namespace tandem::collective {
namespace {

using namespace std::chrono_literals;

NcclId patterned(char seed) {
  NcclId id{};
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(seed + i);
  return id;
}

std::function<NcclId()> patterned_maker() {
  return [] { return patterned(9); };
}

TEST(NcclId, WorkerZeroPublishesItsIdAndTheOthersReadTheSameBytes) {
  cluster::MemoryStore store;
  auto other = std::async(std::launch::async, [&] {
    return exchangeNcclId(store, "nccl/id", 1, [] () -> NcclId { throw Error("only worker 0 makes the id"); },
                          Deadline::afterSeconds(5));
  });
  std::this_thread::sleep_for(20ms);  // worker 1 is waiting by now
  const NcclId made = exchangeNcclId(store, "nccl/id", 0, [] { return patterned(3); }, Deadline::afterSeconds(5));
  EXPECT_EQ(made, patterned(3));
  EXPECT_EQ(other.get(), patterned(3));
}

TEST(NcclId, AnIdThatNeverComesIsNamedAtTheDeadline) {
  cluster::MemoryStore store;
  Stopwatch watch;
  try {
    exchangeNcclId(store, "nccl/id", 2, patterned_maker(), Deadline::after(200ms));
    ADD_FAILURE() << "expected PeerError";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("no unique id from worker 0 under 'nccl/id'"), std::string::npos) << e.what();
  }
  EXPECT_LT(watch.elapsed(), 5.0);
}

TEST(NcclId, AnIdOfTheWrongSizeIsRefused) {
  cluster::MemoryStore store;
  store.set("nccl/id", std::vector<char>(100, 'x'));
  EXPECT_THROW(exchangeNcclId(store, "nccl/id", 1, patterned_maker(), Deadline::afterSeconds(1)), PeerError);
}

// The libnccl.so.2 beside this process's LibTorch: the nvidia-nccl wheel's.
std::string wheelNccl() {
  std::string torch_lib;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const std::string name = info->dlpi_name != nullptr ? info->dlpi_name : "";
        if (name.find("libtorch_cpu.so") != std::string::npos) *static_cast<std::string*>(out) = name;
        return 0;
      },
      &torch_lib);
  if (torch_lib.empty()) return {};
  const auto path = std::filesystem::path(torch_lib).parent_path() / ".." / ".." / "nvidia" / "nccl" / "lib" /
                    "libnccl.so.2";
  return std::filesystem::exists(path) ? path.lexically_normal().string() : std::string();
}

TEST(NcclLibrary, TheWheelsNcclLoadsMakesDistinctIdsAndAJoinWithoutAGpuFailsAtOnce) {
  const std::string path = wheelNccl();
  if (path.empty()) GTEST_SKIP() << "this LibTorch brings no NCCL wheel (a CPU build)";
  const NcclStatus& status = ncclStatus(path);
  ASSERT_TRUE(status.loaded) << status.detail;
  EXPECT_EQ(status.detail.rfind("2.", 0), 0u) << status.detail;
  const NcclId a = makeNcclId(), b = makeNcclId();
  EXPECT_NE(a, b);
  if (tandem::testing::gpuDriverHere()) GTEST_SKIP() << "a GPU driver is here: joining would work";
  Stopwatch watch;
  try {
    NcclCommunicator::connect(a, {0, 1, 2s, "a test job"});
    ADD_FAILURE() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("worker 0 of 1 could not start joining a test job"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(watch.elapsed(), 2.0);
}

}  // namespace
}  // namespace tandem::collective
