#pragma once
// How parameters are spread over parameter servers. Every parameter, in
// registration order, is laid end to end in one float key space; the space
// is cut into fixed-size chunks (the last one shorter), and each chunk goes
// to the server holding the fewest bytes so far. So every server holds the
// same bytes within one chunk, one large tensor is spread over servers, and
// chunk order is forward order (first layers first), the order pulls want.
// Torch-free; a pure function of its inputs, so every worker computes the
// same layout and can check it at rendezvous via fingerprint().
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::ps {

struct TensorSpec {
  std::string name;
  int64_t numel = 0;
};

struct Chunk {
  uint64_t key = 0;    // chunk index; the wire's key range uses these
  int64_t begin = 0;   // first float of the global key space
  int64_t length = 0;  // floats
  int server = 0;   // the primary: pulls, states and clocks go here while it lives
  int backup = -1;  // --ps-replicas 2: the next server, which every push reaches too; -1: none
  // The servers holding the chunk: the primary, then the backup.
  std::vector<int> holders() const { return backup < 0 ? std::vector<int>{server} : std::vector<int>{server, backup}; }
  bool heldBy(int s) const { return s == server || s == backup; }
};

struct KeyLayout {
  std::vector<TensorSpec> tensors;
  std::vector<int64_t> tensor_offsets;  // start of each tensor in the key space
  std::vector<Chunk> chunks;
  std::vector<int64_t> server_floats;   // floats held by each server
  int64_t total_floats = 0;

  // Chunks `server` is the primary of, in key order.
  std::vector<Chunk> chunksOf(int server) const;
  // Chunks `server` holds, as primary or backup, in key order.
  std::vector<Chunk> chunksHeldBy(int server) const;
  int replicas() const { return !chunks.empty() && chunks.front().backup >= 0 ? 2 : 1; }
  // 64-bit hash of names, sizes, chunk size and assignment.
  uint64_t fingerprint() const;
};

// Throws InputError naming the argument for servers < 1, chunk_bytes not a
// positive multiple of 4, an empty tensor list or a negative size, or
// replicas other than 1, or 2 with at least 2 servers. With 2 replicas
// each chunk's backup is the server after its primary (chain-style, as
// ps-lite's key ranges are), so a server's death leaves every chunk a holder.
KeyLayout buildKeyLayout(const std::vector<TensorSpec>& tensors, int servers, int64_t chunk_bytes, int replicas = 1);

// The chunk size, in floats, to build a layout of `total_floats` with, so
// that no server is left empty just because the model is small. Fixed
// chunks of --ps-chunk-mb would give a 1 MB model one 4 MB chunk, and every
// server but one would hold nothing. The rule:
// - if `requested_chunk_floats` already cuts the model into at least
//   `servers` chunks (or the model is empty), it is returned unchanged;
// - otherwise ceil(total / servers), the most even split, when that still
//   yields `servers` chunks;
// - otherwise floor(total / servers), which always does. (Ceil falls short
//   when total < about servers^2: 5 floats on 4 servers as chunks of 2 is
//   only 3 chunks; chunks of 1 give 5.)
// - with fewer floats than servers, 1: one float per chunk, and
//   `servers - total_floats` servers stay idle whatever the size.
// Since the first `servers` chunks each go to an empty server, at least
// min(servers, total_floats) servers hold data. Never larger than the
// request. A pure function, so every worker picks the same size and the
// layouts agree. Throws InputError for servers < 1,
// requested_chunk_floats < 1 or total_floats < 0. Thread-safe.
int64_t chunkFloatsFor(int64_t total_floats, int64_t requested_chunk_floats, int servers);

// --ps-chunk-mb 0 (the default): about 16 chunks a server and at least 32
// in all, none over 4 MiB, none under 32 KiB (16 KiB beyond 2 servers,
// where a floor that binds leaves every server as many chunks). Finer than
// all-reduce buckets: a sync step's first chunk is pushed last in backward
// and then crosses two links (push, then pull) before the next forward can
// use it, so its size is on the critical path; and each server's share
// pipelines through its push window in pieces, so a server needs enough of
// them. In the lab, resnet20 at 100 Mbit/s: 2-4 hosts ran at 0.61-0.87 of
// the comm-bound optimum with 256 KiB chunks and 0.88-1.03 with 32 KiB;
// 4 hosts x 4 flat at 0.88 with 8 chunks a server and 0.96 with 16; 8 hosts
// at 0.88 with 4 a server and 0.97 with 8 (docs/parameter-server.md,
// "Layout"; docs/results/hierarchical-ps.md).
int64_t autoPsChunkFloats(int64_t total_floats, int servers);

// Servers of `layout` that hold no chunk, in increasing order: worth a
// warning, since such a server costs a process and does no work.
// Thread-safe.
std::vector<int> idleServers(const KeyLayout& layout);

}  // namespace tandem::ps
