// Every parameter-server payload decoder on untrusted bytes: each returns a
// value or throws InputError, never anything else, and never reads beyond
// its bytes or allocates without bound (ps-init is capped).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "core/error.hpp"
#include "ps/protocol.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  if (size == 0) return 0;
  const auto bytes = std::span(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    switch (data[0] % 6) {
      case 0: (void)ps::decodeServerInit(text, 1 << 20, "the fuzzer"); break;
      case 1: (void)ps::decodeHello(bytes, "the fuzzer"); break;
      case 2: (void)ps::decodeStepReport(bytes, "the fuzzer"); break;
      case 3: (void)ps::decodeStepAgreement(bytes, "the fuzzer"); break;
      case 4: (void)ps::decodeServerStatus(bytes, "the fuzzer"); break;
      default: (void)ps::decodeLearningRate(bytes, "the fuzzer"); break;
    }
  } catch (const InputError&) {
  }
  return 0;
}
