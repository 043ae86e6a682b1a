// One Gloo in the process: LibTorch's. Its wheel exports Gloo's symbols
// under the same names as Debian's libgloo, so a second copy would split
// Gloo's calls between the two (a context built by one, connected by the
// other: a crash). Tandem's collectives go through c10d, and nothing here
// may load or define another Gloo.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <link.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "cluster/kv_store.hpp"
#include "collective/communicator.hpp"

namespace tandem::collective {
namespace {

using namespace std::chrono_literals;

std::vector<std::string> loadedObjects() {
  std::vector<std::string> names;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        static_cast<std::vector<std::string>*>(out)->push_back(info->dlpi_name ? info->dlpi_name : "");
        return 0;
      },
      &names);
  return names;
}

// Every loaded object that exports `symbol`, by file name.
std::vector<std::string> definersOf(const char* symbol) {
  std::vector<std::string> definers;
  for (const auto& name : loadedObjects()) {
    void* handle = dlopen(name.empty() ? nullptr : name.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (handle == nullptr) continue;
    if (void* address = dlsym(handle, symbol)) {
      Dl_info info{};
      if (dladdr(address, &info) != 0 && info.dli_fname != nullptr) {
        const std::string file = info.dli_fname;
        if (std::find(definers.begin(), definers.end(), file) == definers.end()) definers.push_back(file);
      }
    }
    dlclose(handle);
  }
  return definers;
}

TEST(OneGloo, CollectivesRunOnLibTorchsGlooAndNoOtherIsLoaded) {
  // Two ranks connect and sum, so whatever Gloo the collectives use is live.
  cluster::MemoryStore store;
  std::vector<float> sums(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      CommunicatorOptions options;
      options.rank = r;
      options.size = 2;
      options.timeout = 10s;
      auto comm = Communicator::connect(store, options);
      float x = static_cast<float>(r + 1);
      comm->allreduceSum(&x, 1);
      sums[r] = x;
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(sums, (std::vector<float>{3.0f, 3.0f}));

  for (const auto& name : loadedObjects()) {
    EXPECT_EQ(name.find("libgloo"), std::string::npos) << "a second Gloo is loaded: " << name;
  }
  // Gloo's TCP device factory and its all-reduce, by their mangled names:
  // defined only inside LibTorch (libtorch_cuda carries Gloo's CUDA side,
  // built from the same Gloo, and exports some of the same symbols).
  for (const char* symbol : {"_ZN4gloo9transport3tcp12CreateDeviceERKNS1_4attrE",
                             "_ZN4gloo9allreduceERKNS_16AllreduceOptionsE"}) {
    const auto definers = definersOf(symbol);
    ASSERT_FALSE(definers.empty()) << symbol;
    for (const auto& file : definers) {
      const auto name = file.substr(file.rfind('/') + 1);
      EXPECT_TRUE(name == "libtorch_cpu.so" || name == "libtorch_cuda.so") << symbol << " is defined by " << file;
    }
  }
}

}  // namespace
}  // namespace tandem::collective
