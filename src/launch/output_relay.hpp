#pragma once
// The children's output, relayed line by line from one thread: each line
// whole and prefixed ("[worker 1] ..."), so lines of different children
// never interleave, with an optional status line kept at the bottom of a
// terminal. A slow stdout stalls only the relay, never the reaping.
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::launch {

class OutputRelay {
 public:
  // What becomes of one relayed line of `child`: nullopt relays it as usual
  // ("[label] line"); a string replaces it ("" drops it, other text is
  // written as its own line).
  using LineHook = std::function<std::optional<std::string>(const std::string& child, std::string_view line)>;

  explicit OutputRelay(int output_fd);
  ~OutputRelay();  // stop()
  OutputRelay(const OutputRelay&) = delete;
  OutputRelay& operator=(const OutputRelay&) = delete;

  // Both run on the relay thread; set before the first add().
  void setLineHook(LineHook hook);
  void setStatusLine(std::function<std::string()> status);

  // Relays what `fd` (non-blocking, owned from here on) delivers, with
  // `label` as the prefix and `name` for the hook. Returns the stream's id.
  size_t add(std::string name, std::string label, int fd);
  // The writer is gone: read what is left, up to a bound, and close.
  void drain(size_t id);
  // Returns once every stream has been drained and closed.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::launch
