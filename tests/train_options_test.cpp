// The run-config options, declared once: each names a real field of the
// run config, flags and fields are unique, and values parse by the field's
// own type.
#include "train/train_options.hpp"

#include <gtest/gtest.h>

#include <set>

#include "core/error.hpp"
#include "support/expect_input_error.hpp"
#include "train/config.hpp"

namespace tandem::train {
namespace {

const nlohmann::json& defaults() {
  static const nlohmann::json j = toJson(TrainConfig{});
  return j;
}

nlohmann::json parsed(std::string_view field, std::vector<std::string> texts) {
  const TrainOption& option = trainOption(field);
  return parseOptionValue(option, defaults().at(nlohmann::json::json_pointer(std::string(field))), texts);
}

TEST(TrainOptions, EachNamesARunConfigFieldOnceAndEveryFlagOnce) {
  std::set<std::string> fields, flags;
  for (const auto& o : trainOptions()) {
    EXPECT_TRUE(defaults().contains(nlohmann::json::json_pointer(o.field)))
        << o.name() << " sets " << o.field << ", which the run config does not hold";
    EXPECT_TRUE(fields.insert(o.field).second) << o.field << " is declared twice";
    EXPECT_TRUE(flags.insert(std::string(o.name())).second) << o.name() << " is declared twice";
    EXPECT_FALSE(o.help.empty()) << o.name();
    EXPECT_NE(o.modes, 0) << o.name() << " applies to no mode";
  }
  EXPECT_GE(trainOptions().size(), 60u);
  EXPECT_THROW(trainOption("/no_such_field"), Error);
}

// A value of the field's type other than its default `value`, as given.
nlohmann::json anotherValue(const TrainOption& f, const nlohmann::json& value) {
  if (value.is_boolean()) return !value.get<bool>();
  if (value.is_number_unsigned()) return value.get<uint64_t>() + 3;
  if (value.is_number_integer()) return value.get<int64_t>() + 3;
  if (value.is_number_float()) return value.get<double>() + 0.25;
  if (value.is_string()) return value.get<std::string>() + "x";
  if (value.is_object()) return {{"channels", 1}, {"height", 2}, {"width", 3}};  // a sample shape
  if (f.list == TrainOption::List::kIntegers) return {3, 4};
  return {0.5, 0.25};
}

// A default config with `f` written to another value (a named setting: the
// first of its names that is not the default).
TrainConfig withAnotherValue(const TrainOption& f) {
  const nlohmann::json value = defaults().at(nlohmann::json::json_pointer(f.field));
  std::vector<nlohmann::json> candidates(f.choices.begin(), f.choices.end());
  if (candidates.empty()) candidates.push_back(anotherValue(f, value));
  for (const auto& candidate : candidates) {
    TrainConfig config;
    f.write(config, candidate);
    if (f.read(config) != value) return config;
  }
  ADD_FAILURE() << "nothing written changed what is read back";
  return {};
}

// The stored form is written by the same rows: a field changed alone
// changes its own place in toJson and no other, and reads back after a
// trip through JSON (as a checkpoint's config does).
TEST(ConfigFields, EachStoresItsOwnMemberAndReadsItBack) {
  std::set<std::string> fields;
  for (const auto& f : configFields()) {
    SCOPED_TRACE(f.field);
    ASSERT_TRUE(f.read != nullptr && f.write != nullptr);
    EXPECT_TRUE(fields.insert(f.field).second) << "declared twice";
    const TrainConfig config = withAnotherValue(f);
    nlohmann::json expected = defaults();
    expected[nlohmann::json::json_pointer(f.field)] = f.read(config);
    EXPECT_EQ(toJson(config), expected) << "another member changed too";
    EXPECT_EQ(toJson(trainConfigFromJson(toJson(config))), expected);
  }
  EXPECT_GT(configFields().size(), trainOptions().size()) << "the stored-only fields are missing";
}

TEST(ConfigFields, MissingFieldsKeepTheirDefaultsAndAMistypedOneIsNamed) {
  EXPECT_EQ(toJson(trainConfigFromJson(nlohmann::json::object())), defaults());
  // A config saved before the one mode enum spells --ps-mode's value.
  EXPECT_EQ(trainConfigFromJson({{"distributed", {{"ps_mode", "async"}}}}).distributed.ps_mode, Mode::PsAsync);
  testing::expectInputError([] { trainConfigFromJson({{"distributed", {{"bucket_mb", "big"}}}}); },
                            {"run config", "/distributed/bucket_mb"});
}

TEST(TrainOptions, ValuesParseByTheFieldsTypeAndNameTheFlagWhenTheyDoNot) {
  EXPECT_EQ(parsed("/batch_size", {"128"}), 128);
  EXPECT_EQ(parsed("/seed", {"18446744073709551615"}), UINT64_MAX);
  EXPECT_DOUBLE_EQ(parsed("/optimizer/lr", {"1e-3"}).get<double>(), 1e-3);
  EXPECT_EQ(parsed("/dataset/augment", {}), true);
  EXPECT_EQ(parsed("/lr/boundaries", {"100,200", "300"}), nlohmann::json({100, 200, 300}));
  EXPECT_EQ(parsed("/lr/values", {"0.1,0.01"}), nlohmann::json({0.1, 0.01}));
  EXPECT_EQ(parsed("/dataset/synthetic_shape", {"1x28x28"}),
            nlohmann::json({{"channels", 1}, {"height", 28}, {"width", 28}}));
  EXPECT_EQ(parsed("/distributed/priority", {"off"}), "off");
  testing::expectInputError([] { parsed("/batch_size", {"12x"}); }, {"--batch-size", "'12x'", "integer"});
  testing::expectInputError([] { parsed("/seed", {"-1"}); }, {"--seed", "non-negative"});
  testing::expectInputError([] { parsed("/optimizer/lr", {"fast"}); }, {"--lr", "'fast'", "number"});
  testing::expectInputError([] { parsed("/lr/boundaries", {"100,x"}); }, {"--lr-boundaries", "'x'"});
  testing::expectInputError([] { parsed("/distributed/hierarchical", {"sometimes"}); },
                            {"--hierarchical", "auto or off", "'sometimes'"});
  testing::expectInputError([] { parsed("/dataset/synthetic_shape", {"3x32"}); }, {"--synthetic-shape", "CxHxW"});
  testing::expectInputError([] { parsed("/epochs", {"1", "2"}); }, {"--epochs", "one value"});
}

// Settings are enums in the config; their names are the flags' and the
// JSON's, and a run config naming another is refused.
TEST(TrainOptions, NamedSettingsBecomeTheConfigsEnums) {
  nlohmann::json j = defaults();
  j["distributed"]["priority"] = parsed("/distributed/priority", {"off"});
  j["distributed"]["hierarchical"] = parsed("/distributed/hierarchical", {"off"});
  j["lr"]["scaling"] = parsed("/lr/scaling", {"linear"});
  const TrainConfig c = trainConfigFromJson(j);
  EXPECT_EQ(c.distributed.priority, Switch::kOff);
  EXPECT_EQ(c.distributed.hierarchical, cluster::HostAggregation::kOff);
  EXPECT_EQ(c.lr.scaling, LrScaling::kLinear);
  EXPECT_EQ(c.distributed.shared_memory, Switch::kOn);
  EXPECT_EQ(toJson(c)["distributed"]["priority"], "off") << "checkpoints store the flag's own name";
  j["distributed"]["shared_memory"] = "sometimes";
  testing::expectInputError([&] { trainConfigFromJson(j); }, {"on or off", "'sometimes'"});
}

TEST(TrainOptions, AStrictOptionIsRefusedWhereItWouldChangeNothing) {
  testing::expectInputError([] { requireApplies(trainOption("/distributed/ps_mode"), Mode::AllReduce); },
                            {"--ps-mode", "parameter servers"});
  testing::expectInputError(
      [] { requireApplies(trainOption("/distributed/verify_replicas_every"), Mode::PsAsync); },
      {"--verify-replicas-every", "all-reduce", "ps-async"});
  EXPECT_NO_THROW(requireApplies(trainOption("/distributed/staleness"), Mode::Ssp));
  // Not strict: the same flags may go to a standalone run compared with a distributed one.
  EXPECT_NO_THROW(requireApplies(trainOption("/distributed/ps_chunk_mb"), Mode::Standalone));
}

}  // namespace
}  // namespace tandem::train
