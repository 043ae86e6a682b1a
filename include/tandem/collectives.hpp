#pragma once
// Tandem's collectives on any tensor, in Horovod's vocabulary (included by
// tandem/tandem.hpp). Every rank must make the same calls in the same
// order; each call first checks that the ranks agree (kind, dtype, op,
// shape) and throws InputError naming the ranks that differ, instead of
// pairing unrelated buffers. Tensors may live anywhere and be
// non-contiguous: they travel through a contiguous host copy when needed.
//
// Types: uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64.
//
// Process sets (Horovod's): each collective may run among a subset of the
// ranks instead (`process_set`, an id from add_process_set; 0, the
// default, is every rank). Only the set's members call it, ranks and
// sizes are the set's (rank r is its r-th lowest member; Average divides
// by its size), and broadcast's root is still a rank of the job. A
// non-member's call, or an id that is no set, is an InputError.
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

// Average divides the sum by size() (after postscale), truncating toward
// zero for integer tensors. Adasum is Horovod's; Tandem refuses it by name.
enum class ReduceOp { Sum, Average, Min, Max, Product, Adasum };

struct ReduceOptions {
  ReduceOp op = ReduceOp::Average;
  double prescale = 1.0;   // multiplies each rank's values before the reduction
  double postscale = 1.0;  // multiplies the result
  std::string name;        // optional: ranks whose names differ are told so
  int process_set = 0;     // 0: every rank
};

// An asynchronous collective (Horovod's handle). It runs on Tandem's
// communication thread in call order, overlapping the caller's work.
class Work {
 public:
  Work();
  ~Work();
  Work(const Work&);
  Work& operator=(const Work&);
  // True once it has finished (with or without an error).
  bool poll() const;
  // Waits for it; rethrows its error (PeerError for a dead or silent peer,
  // InputError for calls that differ across ranks). Returns its outputs:
  // the reduced or broadcast tensors (the inputs, in place), the gathered
  // tensor, or alltoall's received tensor and its received splits (int32).
  std::vector<torch::Tensor> wait();

  struct State;

 private:
  friend Work submitWork(std::shared_ptr<State>);
  std::shared_ptr<State> state_;
};

// In place: each tensor becomes its reduction over all ranks. Several
// tensors (one dtype) go in one message (Horovod's grouped_allreduce).
Work allreduce_async(std::vector<torch::Tensor> tensors, const ReduceOptions& options = {});
void allreduce(torch::Tensor& tensor, ReduceOp op = ReduceOp::Average);
void allreduce(std::vector<torch::Tensor> tensors, const ReduceOptions& options);

// Concatenates every rank's tensor along the first dimension, in rank
// order; the first dimension may differ across ranks, the others not.
Work allgather_async(torch::Tensor tensor, const std::string& name = "", int process_set = 0);
torch::Tensor allgather(const torch::Tensor& tensor, const std::string& name = "", int process_set = 0);

// In place: every rank's tensors become root_rank's.
Work broadcast_async(std::vector<torch::Tensor> tensors, int root_rank, const std::string& name = "",
                     int process_set = 0);
void broadcast(torch::Tensor& tensor, int root_rank, const std::string& name = "", int process_set = 0);

// Sends splits[r] rows (first dimension) of `tensor`, in order, to rank r,
// and returns the rows every rank sent here, in rank order, with how many
// came from each. Empty splits: the rows divided evenly over the ranks.
Work alltoall_async(torch::Tensor tensor, std::vector<int64_t> splits = {}, const std::string& name = "",
                    int process_set = 0);

// Returns once every rank (of the set) has called it.
void barrier(int process_set = 0);

// A process set of `ranks` (any order; they are sorted). Every rank of the
// job calls it, member or not, with the same ranks, in the same order as
// the others' add and remove calls; the members connect a communicator
// and a communication thread of their own, so collectives on different
// sets never wait for one another. Returns its id: the oldest id freed by
// remove_process_set, else the next one up from 1. InputError for no
// ranks, a rank outside 0..size()-1 or given twice, a set of these ranks
// already (every rank's included: that is set 0), or an elastic job;
// MismatchError naming the ranks that asked for another set.
int add_process_set(std::vector<int> ranks);
// Every rank calls it, as add_process_set. False for 0 or an id that is
// no set; otherwise its collectives are over (a queued one still runs
// first) and the id is free again.
bool remove_process_set(int id);
// Every set, by id, with its ranks; 0 holds every rank of the job.
std::map<int, std::vector<int>> process_sets();

// Horovod's timeline, in Tandem's trace format (chrome://tracing, Perfetto):
// from here on, every collective and DistributedOptimizer bucket is a span,
// after one for its wait in the communication thread's queue. Rank 0 writes
// `file_path`, as Horovod's coordinator does; every rank may call it. A
// second start writes the first file and records into the new one.
// `mark_cycles` is accepted and ignored: Tandem has no background cycles.
// InputError before init().
void start_timeline(const std::string& file_path, bool mark_cycles = false);
// Writes the timeline and stops recording; nothing when none records.
void stop_timeline();

// This rank has no more data: until every rank has joined, it takes part
// in the others' allreduce calls, DistributedOptimizer steps and barriers
// with zeros (Average still divides by size(), as in Horovod). Other
// collectives while a rank has joined are an InputError on every rank.
// Process sets' collectives are not served: join is the whole job's.
// Returns the rank that joined last.
int join();

// Horovod's cross-host view: the number of ranks with this rank's
// local_rank (one a host, on hosts with equal worker counts), and this
// rank's index among them.
int cross_rank();
int cross_size();

}  // namespace tandem
