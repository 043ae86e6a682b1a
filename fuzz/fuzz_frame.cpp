// A peer's raw message parts into a Frame: whatever the bytes, decodeFrame
// returns a frame or throws InputError, and salvageRequestId never reads
// past its bytes.
#include <cstddef>
#include <cstdint>
#include <vector>

#include <zmq.hpp>

#include "core/error.hpp"
#include "net/frame.hpp"
#include "ps/messages.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  if (size == 0) return 0;
  // First byte: how many parts (1-4) and where the first one ends.
  const size_t count = 1 + (data[0] & 3);
  const size_t first = size > 1 ? std::min<size_t>(size - 1, (data[0] >> 2) + net::kFrameHeaderBytes - 16) : 0;
  const uint8_t* rest = data + 1;
  size_t left = size - 1;
  std::vector<zmq::message_t> parts;
  for (size_t i = 0; i < count; ++i) {
    const size_t n = i == 0 ? std::min(first, left) : (i + 1 == count ? left : left / 2);
    parts.emplace_back(rest, n);
    rest += n;
    left -= n;
  }
  (void)net::salvageRequestId(parts[0].data(), parts[0].size());
  try {
    net::Frame frame = net::decodeFrame(parts, parts.size(), 1 << 20, "the fuzzer", ps::kMessages);
    (void)frame.text();
    (void)frame.bytes();
  } catch (const InputError&) {
  }
  return 0;
}
