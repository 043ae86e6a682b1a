// The environment is read in one place (core/environment.cpp) and handed
// down: a function's inputs are in its signature.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "core/environment.hpp"

namespace tandem {
namespace {

TEST(EnvironmentTest, CaptureSeesTheProcessVariablesAtThatMoment) {
  ::setenv("TANDEM_ENV_TEST_VALUE", "a=b", 1);
  const Environment env = captureEnvironment();
  ::unsetenv("TANDEM_ENV_TEST_VALUE");
  EXPECT_EQ(lookupVariable(env, "TANDEM_ENV_TEST_VALUE"), "a=b");  // split at the first '='
  EXPECT_EQ(lookupVariable(captureEnvironment(), "TANDEM_ENV_TEST_VALUE"), std::nullopt);
}

TEST(EnvironmentTest, LookupsTellUnsetFromEmpty) {
  const Environment env{{"EMPTY", ""}, {"SET", "1"}};
  EXPECT_EQ(lookupVariable(env, "EMPTY"), "");
  EXPECT_EQ(lookupVariable(env, "UNSET"), std::nullopt);
  EXPECT_EQ(variableOr(env, "EMPTY", "fallback"), "");
  EXPECT_EQ(variableOr(env, "UNSET", "fallback"), "fallback");
  EXPECT_EQ(variableOr(env, "SET", "fallback"), "1");
}

TEST(EnvironmentTest, ExportedVariablesAreWhatTheNextCaptureSees) {
  ::setenv("TANDEM_ENV_TEST_GONE", "1", 1);
  exportVariables({{"TANDEM_ENV_TEST_SET", "a=b"}, {"TANDEM_ENV_TEST_GONE", std::nullopt}});
  const Environment env = captureEnvironment();
  EXPECT_EQ(lookupVariable(env, "TANDEM_ENV_TEST_SET"), "a=b");
  EXPECT_EQ(lookupVariable(env, "TANDEM_ENV_TEST_GONE"), std::nullopt);
  exportVariables({{"TANDEM_ENV_TEST_SET", std::nullopt}});
}

TEST(EnvironmentTest, EntriesAreWhatExecTakes) {
  const Environment env{{"B", "2"}, {"A", "x=y"}};
  EXPECT_EQ(environmentEntries(env), (std::vector<std::string>{"A=x=y", "B=2"}));
}

// The invariant itself: no other source of the library, the CLI or the
// Python package reads a variable of its own.
TEST(EnvironmentTest, OnlyCoreEnvironmentReadsTheProcessEnvironment) {
  namespace fs = std::filesystem;
  const fs::path root = TANDEM_SOURCE_DIR;
  const fs::path reader = root / "src" / "core" / "environment.cpp";
  const std::regex reads(R"((\bgetenv\b|\bsecure_getenv\b|\benviron\b|\bos\.environ\b|\bos\.getenv\b))");
  std::string offenders;
  size_t files = 0;
  for (const char* dir : {"src", "include", "python"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".hpp" && ext != ".h" && ext != ".py")) continue;
      ++files;
      if (entry.path() == reader) continue;
      std::ifstream in(entry.path());
      int number = 0;
      for (std::string line; std::getline(in, line);) {
        ++number;
        if (std::regex_search(line, reads)) {
          offenders += fs::relative(entry.path(), root).string() + ":" + std::to_string(number) + ": " + line + "\n";
        }
      }
    }
  }
  EXPECT_GT(files, 100u) << "the sources were not found under " << root;
  EXPECT_EQ(offenders, "") << "read the variable from the Environment the entry point hands down "
                              "(core/environment.hpp) instead";
}

}  // namespace
}  // namespace tandem
