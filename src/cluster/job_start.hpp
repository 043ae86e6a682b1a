#pragma once
// Which start of a job this process belongs to, for tasks that restart
// themselves in place after the job failed (train --restart-wait). A
// restarted task re-executes its own command line with TANDEM_RESTART set;
// the chief's random generation tells the job's next start apart from the
// one that failed, in the coordinator store and at the servers, so that no
// task rejoins the start it is replacing. Torch-free.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/environment.hpp"

namespace tandem::cluster {

struct JobStart {
  uint64_t generation = 0;  // the chief's start this process joined; 0 until it joined
  uint64_t replaces = 0;    // the start that failed before this process began (0: a first start)
  int restarts = 0;         // restarts in place of this task before this process
  // Started by launch in place of a dead task of a running live job: it
  // joins that job and never starts it, nor owns its run directory.
  bool joins_running = false;
  // Started again by the user's own command into a running sync PS job
  // (no launcher): it joins as launch's replacements do, and records that
  // itself in OUT/restarts.jsonl.
  bool joined_by_hand = false;
  // A restarted task waits for the job's next start until then.
  std::optional<std::chrono::system_clock::time_point> wait_until;
  // Set by the trainer: startup is over, and how far training got.
  std::atomic<bool> training{false};
  std::atomic<int64_t> finished_steps{-1};
};

// This process's start, from `env`'s TANDEM_RESTART when set (a restarted
// task); its entry point reads it once, into its JobContext. Throws
// InputError naming the variable when it is malformed.
void readRestartEnvironment(const Environment& env, JobStart& start);

// Reads a TANDEM_RESTART value ("replaces=HEX;until_ms=N;restarts=N",
// as restartEnvironment writes it, or "joins_running=1", as launch gives a
// live job's replacement) into `start`. Throws InputError naming
// the variable and the item at fault.
void parseRestartEnvironment(std::string_view text, JobStart& start);

// A fresh non-zero generation for a chief's start.
uint64_t newGeneration();

// The TANDEM_RESTART value for this task's next process: it replaces this
// start and waits up to `wait_s` for the job's next one.
std::string restartEnvironment(const JobStart& start, double wait_s);

// What a startup wait (--rendezvous-timeout) becomes in a restarted task:
// what is left of its wait for the job's next start (at least 1 s).
double startupSeconds(const JobStart& start, double configured);

// The coordinator store key that holds the chief's generation, in hex.
inline constexpr const char* kGenerationKey = "tandem/generation";
std::string generationText(uint64_t generation);
// The generation generationText wrote; 0 for anything else.
uint64_t parseGeneration(std::string_view text);

}  // namespace tandem::cluster
