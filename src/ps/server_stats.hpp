#pragma once
// A server's traffic and apply counters, and the summary they become.
// Single-threaded: only the server's I/O thread touches them. A server that
// starts over (the chief's next start) counts again from there.
#include <nlohmann/json.hpp>

#include <cstdint>

namespace tandem::ps {

struct ServerStats {
  uint64_t pushes = 0, pulls = 0, bytes_in = 0, bytes_out = 0, bad_frames = 0;
  // Of bytes_in and bytes_out, what crossed in same-host workers' shared
  // memory (a payload there counts its values, not its reference).
  uint64_t shared_bytes_in = 0, shared_bytes_out = 0;
  uint64_t chunk_updates = 0;  // one chunk's optimizer step each
  uint64_t rejoins = 0;        // replacement workers taken in (async and SSP)
  uint64_t started_over = 0;   // times the chief's next start re-initialised this server
  // Async replicas: applied pushes sent on to the backup, and received from
  // the primary; a worker's push the backup had already been forwarded.
  uint64_t forwards_out = 0, forwards_in = 0, repeated_pushes = 0;
  double apply_seconds = 0;
  uint64_t applied_bytes = 0;
  double reported_apply_seconds = 0;  // apply_seconds at the last progress line

  // `chunks`: the chunks this server holds; every whole-model step updates
  // each of them once, so chunk_updates / chunks counts model steps.
  nlohmann::json toJson(size_t chunks) const {
    return {{"chunk_updates", chunk_updates},
            {"model_updates", chunks == 0 ? 0 : chunk_updates / chunks},
            {"pushes", pushes},
            {"pulls", pulls},
            {"bytes_in", bytes_in},
            {"bytes_out", bytes_out},
            {"shared_memory_bytes_in", shared_bytes_in},
            {"shared_memory_bytes_out", shared_bytes_out},
            {"bad_frames", bad_frames},
            {"rejoined_workers", rejoins},
            {"started_over", started_over},
            {"forwards_out", forwards_out},
            {"forwards_in", forwards_in},
            {"repeated_pushes", repeated_pushes},
            {"apply_seconds", apply_seconds},
            {"apply_gb_per_s", apply_seconds > 0 ? static_cast<double>(applied_bytes) / apply_seconds / 1e9 : 0.0}};
  }
};

}  // namespace tandem::ps
