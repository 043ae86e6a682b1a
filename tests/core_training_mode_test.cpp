#include "core/training_mode.hpp"

#include <gtest/gtest.h>

#include "support/expect_input_error.hpp"

namespace tandem {
namespace {

TEST(Mode, EveryNameParsesBackToItsMode) {
  for (Mode mode : {Mode::Standalone, Mode::AllReduce, Mode::PsSync,
                            Mode::PsAsync, Mode::Ssp}) {
    EXPECT_EQ(parseMode(modeName(mode), "--mode"), mode) << modeName(mode);
    if (usesServers(mode)) {
      EXPECT_EQ(parseServerMode(modeName(mode), "mode"), mode);
    }
  }
  EXPECT_EQ(modeName(Mode::Ssp), "ps-ssp");
}

TEST(Mode, OtherSpellingsAreBadInputListingTheNames) {
  testing::expectInputError([] { parseMode("sync", "--mode"); },
                            {"--mode: unknown mode 'sync'", "standalone, allreduce, ps-sync, ps-async, ps-ssp"});
  testing::expectInputError([] { parseServerMode("ssp", "DistributedOptimizer: mode"); },
                            {"unknown mode 'ssp' (bounded staleness is now ps-ssp)", "use one of ps-sync, ps-async, ps-ssp"});
  testing::expectInputError([] { parseServerMode("allreduce", "ps 0: ps-init"); },
                            {"ps 0: ps-init: unknown mode 'allreduce'"});
}

}  // namespace
}  // namespace tandem
