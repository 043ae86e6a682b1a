// The declaration's keyword face: every option has one keyword, values given
// by keyword are typed and checked as their flags are, and errors name the
// keyword where the CLI's name the flag.
#include "train/option_keywords.hpp"

#include <gtest/gtest.h>

#include <set>
#include <stdexcept>

#include "support/expect_input_error.hpp"
#include "tandem/option_defaults.hpp"

namespace tandem::train {
namespace {

TEST(OptionKeywords, EveryOptionHasOneKeywordNoOtherHas) {
  std::set<std::string> keywords;
  for (const auto& o : trainOptions()) {
    ASSERT_FALSE(o.keyword().empty()) << o.name();
    EXPECT_TRUE(keywords.insert(std::string(o.keyword())).second) << "two options are called " << o.keyword();
    EXPECT_EQ(optionByKeyword(o.keyword()), &o);
  }
  EXPECT_EQ(optionByKeyword("ps_chunk_mb")->name(), "--ps-chunk-mb");
  EXPECT_EQ(optionByKeyword("optimizer")->field, "/optimizer/name");
  EXPECT_EQ(optionByKeyword("no_such_option"), nullptr);
}

TEST(OptionKeywords, DefaultsAreTheRunConfigsOwn) {
  const TrainConfig c;
  EXPECT_EQ(option_default<double>("ps_chunk_mb"), c.distributed.ps_chunk_mb);
  EXPECT_EQ(option_default<int64_t>("local_steps"), c.distributed.local_steps);
  EXPECT_EQ(option_default<std::string>("outer_optimizer"), c.distributed.outer_optimizer);
  EXPECT_EQ(option_default<std::string>("wire_dtype"), "fp32");
  EXPECT_EQ(option_default<uint64_t>("seed"), c.seed);
  EXPECT_EQ(option_default<Mode>("ps_mode"), Mode::PsSync);
  EXPECT_EQ(option_default<bool>("error_feedback"), false);
  EXPECT_THROW(option_default<double>("no_such_option"), std::logic_error);
  EXPECT_THROW(option_default<int>("wire_dtype"), std::logic_error);
}

TEST(OptionKeywords, ValuesAreTypedAndCheckedAsTheirFlags) {
  TrainConfig c;
  applyKeywordValues(c, {{"ps_chunk_mb", 2}, {"local_steps", 5}, {"outer_optimizer", "sgd"}, {"push_bits", 4},
                         {"wire_dtype", "bf16"}, {"error_feedback", true}, {"outer_lr", nullptr}},
                     "test");
  EXPECT_EQ(c.distributed.ps_chunk_mb, 2.0);
  EXPECT_EQ(c.distributed.local_steps, 5);
  EXPECT_EQ(c.distributed.outer_optimizer, "sgd");
  EXPECT_EQ(c.distributed.push_bits, 4);
  EXPECT_EQ(c.distributed.wire_dtype, WireDtype::kBfloat16);
  EXPECT_TRUE(c.distributed.error_feedback);
  EXPECT_EQ(c.distributed.outer_lr, TrainConfig{}.distributed.outer_lr);  // null keeps the default

  using testing::expectInputError;
  expectInputError([] { TrainConfig t; applyKeywordValues(t, {{"push_bits", 3}}, "tandem"); },
                   {"tandem: push_bits 3: expected 8 or 4"});
  expectInputError([] { TrainConfig t; applyKeywordValues(t, {{"local_steps", -1}}, "tandem"); },
                   {"tandem: local_steps: must be >= 1, got -1"});
  expectInputError([] { TrainConfig t; applyKeywordValues(t, {{"ps_chunk_mb", 65}}, "tandem"); },
                   {"ps_chunk_mb: must be 0 (from the model) or in (0, 64]"});
  expectInputError([] { TrainConfig t; applyKeywordValues(t, {{"local_steps", 2.5}}, "w"); },
                   {"w: local_steps: '2.5' is not an integer"});
  expectInputError([] { TrainConfig t; applyKeywordValues(t, {{"local_steps", true}}, "w"); },
                   {"w: local_steps: expected an integer, got true"});
  expectInputError([] { TrainConfig t; applyKeywordValues(t, {{"error_feedback", 1}}, "w"); },
                   {"error_feedback: expected true or false, got 1"});
  expectInputError([] { TrainConfig t; applyKeywordValues(t, {{"ps_chunk_mb", "2"}}, "w"); },
                   {"ps_chunk_mb: expected a number, got \"2\""});
  expectInputError([] { TrainConfig t; applyKeywordValues(t, {{"wire_dtype", "fp8"}}, "w"); },
                   {"wire_dtype: expected", "got 'fp8'"});
  expectInputError([] { TrainConfig t; applyKeywordValues(t, {{"chunk_mb", 2}}, "w"); },
                   {"w: unknown option 'chunk_mb'"});
  // Combinations are checked too: error feedback needs a 16-bit wire.
  expectInputError([] { TrainConfig t; applyKeywordValues(t, {{"error_feedback", true}}, "w"); },
                   {"error_feedback: needs wire_dtype fp16 or bf16"});
}

TEST(OptionKeywords, MessagesSpellFlagsAsKeywords) {
  EXPECT_EQ(inKeywordTerms("--ps-chunk-mb: must be positive"), "ps_chunk_mb: must be positive");
  EXPECT_EQ(inKeywordTerms("--adam-eps and --eps"), "eps and eps");  // an alias too
  EXPECT_EQ(inKeywordTerms("needs --ps-mode async or --staleness k"), "needs ps_mode async or staleness k");
  // Not an option's flag, or part of a longer one: left alone.
  EXPECT_EQ(inKeywordTerms("--ps_hosts, --lr-x, a--lr"), "--ps_hosts, --lr-x, a--lr");
}

TEST(OptionKeywords, ARunConfigStoresModesByNameAndLoadsThePsModeSpelling) {
  TrainConfig c;
  c.distributed.ps_mode = Mode::PsAsync;
  nlohmann::json j = toJson(c);
  EXPECT_EQ(j["distributed"]["ps_mode"], "ps-async");
  j["distributed"]["ps_mode"] = "async";  // as configs saved before the one mode enum hold it
  EXPECT_EQ(trainConfigFromJson(j).distributed.ps_mode, Mode::PsAsync);
  j["distributed"]["ps_mode"] = "allreduce";
  TrainConfig wrong = trainConfigFromJson(j);
  testing::expectInputError([&] { validate(wrong); }, {"--ps-mode: expected sync or async, got allreduce"});
}

}  // namespace
}  // namespace tandem::train
