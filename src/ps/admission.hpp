#pragma once
// Who may join a parameter server, and when. The chief's init starts the
// job here (or starts it over after the chief failed and came back); a
// worker's hello is answered once the init of the start it joined has
// arrived and every chunk is set, and only if it names a worker of that
// start with the chief's parameter layout. Pure, as ChunkStore is: the
// request handler decodes, asks, and replies as it is told (request_handler.cpp).
#include <cstdint>
#include <string>
#include <vector>

#include "ps/chunk_store.hpp"
#include "ps/protocol.hpp"

namespace tandem::ps {

class Admission {
 public:
  struct HeldHello {
    std::string routing;
    uint64_t request_id = 0;
    Hello hello;
    bool same_host = false;  // it came over the same-host socket (its shared memory may be mapped)
  };

  // Whether the chief's init `c` may start here: true when it replaces the
  // start this server holds (the server then starts over first), false for
  // a first init. Throws Refusal for any other second init: a repeat, or
  // another job's chief.
  bool mayInit(const ServerConfig& c, const std::string& server) const;
  // `c` is this server's start from now on; no chunk of it is set yet.
  void initialised(const ServerConfig& c);
  // Forgets the start (the chief's next one is on its way). Held hellos stay.
  void forget();

  // A worker's hello: true when it may be registered now; false when it is
  // held until its start is ready (it came before the init of the start
  // it joined, or before every chunk was set).
  bool admitNow(const HeldHello& hello);
  // Every chunk of the start is set: the held hellos of this start, to
  // register in the order they came. Those of another start stay held.
  std::vector<HeldHello> ready();
  bool isReady() const { return ready_; }

  // Throws Refusal naming the worker when `h` names no worker of this start
  // or computed another parameter layout than the chief.
  void check(const Hello& h) const;
  // Whether a worker index already connected may be taken over by a new
  // connection (a replacement for a worker that died): only async and SSP
  // jobs; a sync step needs every worker's gradient of that step.
  bool elastic() const { return mode_ != Mode::PsSync; }
  // The Refusal for a hello the worker registry would not bind (`why`).
  Refusal bindRefusal(std::string why) const;

 private:
  bool initialised_ = false;
  bool ready_ = false;
  uint64_t generation_ = 0;
  uint64_t layout_fingerprint_ = 0;
  int workers_ = 0;
  Mode mode_ = Mode::PsSync;
  std::vector<HeldHello> held_;
};

}  // namespace tandem::ps
