// The coordinator store's payload reader, driven by the bytes themselves:
// each byte of the program half picks the next read (u32, u64, string,
// string list, rest, end), the data half is what is read. Every read either
// returns in-bounds values or throws InputError. The data half is also
// decoded as a quorum view, a quorum request and the chief's request to
// host the quorum: what is accepted must
// encode back to exactly its bytes (the decoders take nothing they ignore).
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <vector>
#include <span>

#include "cluster/quorum_messages.hpp"
#include "core/error.hpp"
#include "net/wire.hpp"

namespace {

template <class Decoded, class Encode>
void roundTrip(Decoded decoded, Encode encode, std::span<const std::byte> payload) {
  const std::vector<char> again = encode(decoded);
  if (again.size() != payload.size() || !std::equal(again.begin(), again.end(),
                                                    reinterpret_cast<const char*>(payload.data()))) {
    __builtin_trap();  // accepted bytes that do not encode back
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  if (size < 2) return 0;
  const size_t program = std::min<size_t>(data[0], size - 1);
  const auto payload = std::span(reinterpret_cast<const std::byte*>(data + 1 + program), size - 1 - program);
  try {
    roundTrip(cluster::decodeQuorumView(payload, "the fuzzer"), cluster::encodeQuorumView, payload);
  } catch (const InputError&) {
  }
  try {
    roundTrip(cluster::decodeQuorumRequest(payload, "the fuzzer", "quorum request"), cluster::encodeQuorumRequest,
              payload);
  } catch (const InputError&) {
  }
  try {
    roundTrip(cluster::decodeQuorumHosting(payload, "the fuzzer"), cluster::encodeQuorumHosting, payload);
  } catch (const InputError&) {
  }
  net::PayloadReader reader(payload, "the fuzzer", "store payload");
  try {
    for (size_t i = 0; i < program; ++i) {
      switch (data[1 + i] % 6) {
        case 0: (void)reader.u32("a u32"); break;
        case 1: (void)reader.u64("a u64"); break;
        case 2: {
          const auto s = reader.string("a string");
          if (!s.empty() && s.data() + s.size() > reinterpret_cast<const char*>(payload.data() + payload.size())) {
            __builtin_trap();  // a view past the payload
          }
          break;
        }
        case 3: (void)reader.strings("a list"); break;
        case 4: (void)reader.rest(); break;
        default: reader.expectEnd(); break;
      }
    }
  } catch (const InputError&) {
  }
  return 0;
}
