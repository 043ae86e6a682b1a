#include "train/device_feeder.hpp"
#include "support/numbered_batches.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>


namespace tandem::train {
namespace {

using testing::numberOf;

// Records the order of copies and waits, as the CUDA copier would issue them.
class RecordingCopier final : public BatchCopier {
 public:
  explicit RecordingCopier(std::vector<std::string>& log) : log_(log) {}
  Ticket issue(const data::Batch& host) override {
    log_.push_back("copy " + std::to_string(numberOf(host)));
    return {host, std::make_shared<int64_t>(numberOf(host))};
  }
  data::Batch collect(Ticket ticket) override {
    const int64_t marker = *static_cast<int64_t*>(ticket.done.get());
    EXPECT_EQ(marker, numberOf(ticket.batch)) << "a batch came back with another batch's completion marker";
    log_.push_back("wait " + std::to_string(marker));
    return ticket.batch;
  }

 private:
  std::vector<std::string>& log_;
};

TEST(DeviceFeederTest, EachCopyIsIssuedAStepBeforeItsBatchIsUsed) {
  std::vector<std::string> log;
  int64_t taken = 0;
  DeviceFeeder feeder([&] { return testing::numberedBatch(taken++); }, 3, std::make_unique<RecordingCopier>(log));
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(numberOf(feeder.next()), i);
    log.push_back("use " + std::to_string(i));
  }
  // Batch i+1's copy is on its way before batch i is computed on, and the
  // source is never read past its count (the prefetcher throws there).
  const std::vector<std::string> expected = {"copy 0", "copy 1", "wait 0", "use 0", "copy 2",
                                             "wait 1", "use 1",  "wait 2", "use 2"};
  EXPECT_EQ(log, expected);
  EXPECT_EQ(taken, 3);
}

TEST(DeviceFeederTest, OnTheCpuBatchesPassThroughInOrder) {
  int64_t taken = 0;
  DeviceFeeder feeder([&] { return testing::numberedBatch(taken++); }, 2, nullptr);
  EXPECT_EQ(numberOf(feeder.next()), 0);
  EXPECT_EQ(taken, 1);  // nothing is read ahead where nothing is copied
  EXPECT_EQ(numberOf(feeder.next()), 1);
}

TEST(DeviceFeederTest, ASingleBatchIsFedWithoutReadingAhead) {
  std::vector<std::string> log;
  int64_t taken = 0;
  DeviceFeeder feeder([&] { return testing::numberedBatch(taken++); }, 1, std::make_unique<RecordingCopier>(log));
  EXPECT_EQ(numberOf(feeder.next()), 0);
  EXPECT_EQ(log, (std::vector<std::string>{"copy 0", "wait 0"}));
  EXPECT_EQ(taken, 1);
}

}  // namespace
}  // namespace tandem::train
