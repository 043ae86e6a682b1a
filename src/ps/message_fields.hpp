#pragma once
// How a parameter-server message maps to bytes, declared once: each message
// has a Layout<M> whose `fields` names its fields in wire order, and the
// same declaration drives the encoder and the decoder, so the two cannot
// drift apart. The decoder reads through net::PayloadReader: every field is
// checked against the bytes that arrived before it is used, and a list
// reserves no more than those bytes could hold. Errors keep the wording the
// hand-written decoders had ("frame from <peer>: <what> truncated at ...").
// Thread-compatible (no shared state).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "net/wire.hpp"

namespace tandem::ps::fields {

// Specialised once per message, next to its encode and decode:
//   template <> struct Layout<M> {
//     static constexpr std::string_view what = "ps-clock payload";  // errors name it
//     template <class F, class Msg> static void fields(F& f, Msg& m);  // Msg: M or const M
//   };
template <class M>
struct Layout;

// Two yes/no answers sharing one word: the bits' meanings, not their order, are the wire's.
struct Bit {
  uint32_t mask;
};

class Encoder {
 public:
  static constexpr bool kDecoding = false;

  void u32(std::string_view, uint32_t v) { w_.putU32(v); }
  void u64(std::string_view, uint64_t v) { w_.putU64(v); }
  void i32(std::string_view, int32_t v) { w_.putU32(static_cast<uint32_t>(v)); }
  void f64(std::string_view, double v) { w_.putU64(std::bit_cast<uint64_t>(v)); }
  // A u32 that must be 0 or 1.
  void flag(std::string_view, std::string_view, bool v) { w_.putU32(v ? 1 : 0); }
  // A u32 whose every non-zero value reads as true.
  void truthy(std::string_view, bool v) { w_.putU32(v ? 1 : 0); }
  // Several bools in one u32; unknown bits are ignored when read.
  void bits(std::string_view, Bit a, bool va, Bit b, bool vb) {
    w_.putU32((va ? a.mask : 0) | (vb ? b.mask : 0));
  }
  // A u32 count, then that many u32s. Decoding, `check(count, peer)` may
  // refuse the count before any clock is read.
  template <class Check>
  void u32s(std::string_view, std::string_view, const std::vector<uint32_t>& list, Check&&) {
    w_.putU32(static_cast<uint32_t>(list.size()));
    for (uint32_t v : list) w_.putU32(v);
  }
  // Fields present only when the payload goes on (an older peer's message
  // ends before them).
  template <class T, class Fields>
  void optionalTail(const std::optional<T>& value, Fields&& fields) {
    if (value) fields(*this, *value);
  }
  // The payload's last bytes, exactly N of them.
  template <size_t N>
  void tailBytes(std::string_view, const std::array<uint8_t, N>& bytes) {
    w_.putRaw(bytes.data(), bytes.size());
  }

  std::vector<char> take() { return w_.take(); }

 private:
  net::PayloadWriter w_;
};

class Decoder {
 public:
  static constexpr bool kDecoding = true;

  Decoder(std::span<const std::byte> bytes, std::string_view peer, std::string_view what)
      : r_(bytes, peer, what), peer_(peer), what_(what) {}

  void u32(std::string_view name, uint32_t& v) { v = r_.u32(name); }
  void u64(std::string_view name, uint64_t& v) { v = r_.u64(name); }
  void i32(std::string_view name, int32_t& v) { v = static_cast<int32_t>(r_.u32(name)); }
  void f64(std::string_view name, double& v) { v = std::bit_cast<double>(r_.u64(name)); }
  void flag(std::string_view name, std::string_view label, bool& v) {
    const uint32_t word = r_.u32(name);
    if (word > 1) throw InputError(fmt::format("{}: {}: {} {} is neither 0 nor 1", peer_, what_, label, word));
    v = word == 1;
  }
  void truthy(std::string_view name, bool& v) { v = r_.u32(name) != 0; }
  void bits(std::string_view name, Bit a, bool& va, Bit b, bool& vb) {
    const uint32_t word = r_.u32(name);
    va = (word & a.mask) != 0;
    vb = (word & b.mask) != 0;
  }
  template <class Check>
  void u32s(std::string_view count_name, std::string_view item_name, std::vector<uint32_t>& list, Check&& check) {
    const uint32_t count = r_.u32(count_name);
    check(count, std::string_view(peer_));
    list.clear();
    // Never more than the bytes left could hold: a lying count fails at
    // the end of the bytes, not in the allocator.
    list.reserve(std::min<size_t>(count, r_.remaining() / sizeof(uint32_t)));
    for (uint32_t i = 0; i < count; ++i) list.push_back(r_.u32(item_name));
  }
  template <class T, class Fields>
  void optionalTail(std::optional<T>& value, Fields&& fields) {
    if (r_.remaining() == 0) return;
    fields(*this, value.emplace());
  }
  template <size_t N>
  void tailBytes(std::string_view name, std::array<uint8_t, N>& bytes) {
    const auto rest = r_.rest();
    if (rest.size() != N) {
      throw InputError(fmt::format("{}: {}: {} of {} bytes, expected {}", peer_, what_, name, rest.size(), N));
    }
    std::memcpy(bytes.data(), rest.data(), N);
  }

  void expectEnd() { r_.expectEnd(); }
  const std::string& peer() const { return peer_; }
  const std::string& what() const { return what_; }

 private:
  net::PayloadReader r_;
  std::string peer_;
  std::string what_;
};

template <class M>
std::vector<char> encodeMessage(const M& message) {
  Encoder e;
  Layout<M>::fields(e, message);
  return e.take();
}

// Reads every field, then insists nothing is left over. `context` goes to
// a Layout whose fields need it (a list's expected length).
template <class M, class... Context>
M decodeMessage(std::span<const std::byte> bytes, std::string_view peer, const Context&... context) {
  Decoder d(bytes, peer, Layout<M>::what);
  M message;
  Layout<M>::fields(d, message, context...);
  d.expectEnd();
  return message;
}

}  // namespace tandem::ps::fields
