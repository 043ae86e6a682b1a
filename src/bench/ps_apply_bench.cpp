#include "bench/ps_apply_bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "optim/kernels.hpp"
#include "ps/delay_compensation.hpp"

namespace tandem::bench {
namespace {

// Best seconds per call of `pass` over at least `min_seconds` (and 3 calls).
double bestPass(const std::function<void()>& pass, double min_seconds) {
  double best = 1e30;
  Stopwatch total;
  for (int i = 0; i < 3 || total.elapsed() < min_seconds; ++i) {
    Stopwatch one;
    pass();
    best = std::min(best, one.elapsed());
  }
  return best;
}

}  // namespace

std::vector<ApplyBenchRow> runApplyBench(int64_t floats, double min_seconds) {
  if (floats < 1) throw InputError(fmt::format("--mb: the buffer must hold at least one float, got {}", floats));
  const auto n = static_cast<size_t>(floats);
  std::vector<float> param(n, 0.5f), grad(n, 0.001f), a(n, 0.0f), b(n, 0.0f), copy(n);
  std::vector<std::vector<float>> worker_grads(4, std::vector<float>(n, 0.25f));
  const double bytes = static_cast<double>(n) * sizeof(float);
  int64_t step = 0;
  std::vector<ApplyBenchRow> rows;
  auto add = [&](const std::string& kernel, double seconds) { rows.push_back({kernel, seconds, bytes / seconds / 1e9, 0}); };
  add("memcpy", bestPass([&] { std::memcpy(copy.data(), grad.data(), n * sizeof(float)); }, min_seconds));
  const optim::SgdSettings sgd{0.01, 0.9, 0.0, false};
  add("sgd-momentum", bestPass([&] { optim::sgdUpdate(param, grad, a, false, sgd); }, min_seconds));
  // What --delay-compensation adds to an async apply: the correction from
  // a worker's pulled values and the mean square, inside SGD's pass (as the
  // servers run it for SGD), and as a pass of its own first (Adam, RMSprop);
  // the constant form reads no mean squares.
  std::vector<float> pulled(n, 0.49f), mean_square(n, 0.0f);
  const optim::DelayCorrection fused{pulled.data(), mean_square.data(), 2.0f, ps::kDcMeanSquareDecay,
                                     ps::kDcEpsilon};
  const optim::DelayCorrection constant{pulled.data(), nullptr, 0.04f};
  add("sgd-momentum, delay-compensated",
      bestPass([&] { optim::sgdUpdate(param, grad, a, false, sgd, &fused); }, min_seconds));
  add("sgd-momentum, delay-compensated, constant lambda",
      bestPass([&] { optim::sgdUpdate(param, grad, a, false, sgd, &constant); }, min_seconds));
  add("sgd-momentum, delay-compensated in two passes", bestPass([&] {
        ps::compensateDelay(grad, param, pulled, mean_square, 2.0f);
        optim::sgdUpdate(param, grad, a, false, sgd);
      }, min_seconds));
  // An async server's work per push: the apply, then the pusher's next
  // pull, whose values are copied into the reply. A compensating server's
  // reply is that worker's record (ps::recordPull): the same one copy.
  std::vector<float> reply(n);
  auto cycle = [&](const optim::DelayCorrection* correction, float* record) {
    optim::sgdUpdate(param, grad, a, false, sgd, correction);
    std::memcpy(record, param.data(), n * sizeof(float));
  };
  add("async push and pull, sgd-momentum", bestPass([&] { cycle(nullptr, reply.data()); }, min_seconds));
  add("async push and pull, delay-compensated", bestPass([&] { cycle(&fused, pulled.data()); }, min_seconds));
  add("async push and pull, delay-compensated, constant lambda",
      bestPass([&] { cycle(&constant, pulled.data()); }, min_seconds));
  add("adam", bestPass([&] { optim::adamUpdate(param, grad, a, b, ++step, {0.001, 0.9, 0.999, 1e-8, 0.0}); }, min_seconds));
  // What a sync server does before applying: add up the workers' shares.
  add("sum of 4 gradients", bestPass([&] {
        for (size_t w = 1; w < worker_grads.size(); ++w) optim::addInto(worker_grads[0], worker_grads[w]);
      }, min_seconds));
  for (auto& r : rows) r.vs_memcpy = r.gbps / rows[0].gbps;
  return rows;
}

}  // namespace tandem::bench
