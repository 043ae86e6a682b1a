#include "core/training_mode.hpp"

#include <gtest/gtest.h>

#include "support/expect_input_error.hpp"

namespace tandem {
namespace {

TEST(TrainingMode, EveryNameParsesBackToItsMode) {
  for (TrainingMode mode : {TrainingMode::kStandalone, TrainingMode::kAllReduce, TrainingMode::kPsSync,
                            TrainingMode::kPsAsync, TrainingMode::kPsBounded}) {
    EXPECT_EQ(parseTrainingMode(modeName(mode), "--mode"), mode) << modeName(mode);
    if (usesServers(mode)) {
      EXPECT_EQ(parseServerMode(modeName(mode), "mode"), mode);
    }
  }
  EXPECT_EQ(modeName(TrainingMode::kPsBounded), "ps-ssp");
}

TEST(TrainingMode, OtherSpellingsAreBadInputListingTheNames) {
  testing::expectInputError([] { parseTrainingMode("sync", "--mode"); },
                            {"--mode: unknown mode 'sync'", "standalone, allreduce, ps-sync, ps-async, ps-ssp"});
  testing::expectInputError([] { parseServerMode("ssp", "DistributedOptimizer: mode"); },
                            {"unknown mode 'ssp' (bounded staleness is now ps-ssp)", "use one of ps-sync, ps-async, ps-ssp"});
  testing::expectInputError([] { parseServerMode("allreduce", "ps 0: ps-init"); },
                            {"ps 0: ps-init: unknown mode 'allreduce'"});
}

}  // namespace
}  // namespace tandem
