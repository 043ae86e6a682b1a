// Compiled with the shared torch header: proves that a torch translation
// unit sees the fmt spdlog was built against, not the wheel's copy.
#include <fmt/core.h>

static_assert(FMT_VERSION / 10000 == TANDEM_FMT_VERSION,
              "a torch translation unit sees another fmt than spdlog's (see CMakeLists.txt, fmt-include)");
