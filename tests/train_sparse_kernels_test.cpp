// Row-sparse steps of an embedding table (optim/sparse_kernels, through
// ps::RowTable) against torch's own: SGD and Adagrad of torch::optim on an
// embedding's sparse gradient, and SparseAdam, whose Python steps are
// written out here in tensor ops, operation for operation. Batches name
// rows more than once (their gradients add up) and leave most rows alone
// (their values and moments must not move).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "optim/sparse_kernels.hpp"
#include "ps/row_table.hpp"

namespace tandem::ps {
namespace {

constexpr int64_t kRows = 50;
constexpr int64_t kDim = 8;
constexpr int kSteps = 30;

RowTableOptions tableOptions(const std::string& optimizer) {
  return {.name = "table 0", .table = 0, .num_rows = kRows, .dim = kDim, .seed = 11, .init_scale = 0.5f,
          .optimizer = optim::sparseOptimizerDefaults(optimizer)};
}

// The table's rows as a dense tensor, every row pulled (and so made).
torch::Tensor denseRows(RowTable& table) {
  std::vector<int64_t> all(kRows);
  for (int64_t i = 0; i < kRows; ++i) all[i] = i;
  torch::Tensor rows = torch::empty({kRows, kDim});
  table.pull(all, {rows.data_ptr<float>(), static_cast<size_t>(rows.numel())});
  return rows;
}

struct Batch {
  torch::Tensor ids;       // with repeats, a few rows of kRows
  torch::Tensor upstream;  // d(loss)/d(looked-up rows)
};

Batch batchFor(int step) {
  torch::manual_seed(100 + step);
  return {torch::randint(0, 12, {16}, torch::kLong) * 3 % kRows, torch::randn({16, kDim})};
}

// The table's step for `batch`: deduplicated ids, their gradients summed.
void stepTable(RowTable& table, const Batch& batch, double lr) {
  std::span<const int64_t> ids(batch.ids.data_ptr<int64_t>(), static_cast<size_t>(batch.ids.numel()));
  const UniqueRows rows = uniqueRows(ids);
  std::vector<float> summed(rows.ids.size() * kDim);
  sumByRow(rows, {batch.upstream.data_ptr<float>(), static_cast<size_t>(batch.upstream.numel())}, kDim, summed);
  table.apply(rows.ids, summed, lr);
}

// torch's sparse gradient of `weight` for `batch`.
void backwardSparse(torch::Tensor& weight, const Batch& batch) {
  weight.mutable_grad() = torch::Tensor();
  torch::Tensor looked_up = torch::embedding(weight, batch.ids, -1, false, /*sparse=*/true);
  (looked_up * batch.upstream).sum().backward();
  ASSERT_TRUE(weight.grad().is_sparse());
}

// Steps `table` and torch's optimizer side by side; returns the largest
// difference, and checks that untouched rows stayed as they were.
template <class TorchStep>
float trackTorch(RowTable& table, double lr, TorchStep torch_step) {
  torch::Tensor weight = denseRows(table).clone().set_requires_grad(true);
  const torch::Tensor start = weight.detach().clone();
  for (int step = 1; step <= kSteps; ++step) {
    const Batch batch = batchFor(step);
    backwardSparse(weight, batch);
    torch_step(weight, step);
    stepTable(table, batch, lr);
  }
  const torch::Tensor ours = denseRows(table);
  // Rows no batch named: ids are multiples of 3 below 36.
  for (int64_t row : {1, 2, 40, 49}) EXPECT_TRUE(torch::equal(ours[row], start[row])) << "row " << row;
  EXPECT_GT((ours - start).abs().max().item<float>(), 1e-2f);  // the touched rows did move
  return (ours - weight.detach()).abs().max().item<float>();
}

TEST(SparseKernels, SgdMatchesTorchOnASparseGradient) {
  RowTable table(tableOptions("sgd"));
  std::unique_ptr<torch::optim::SGD> sgd;
  const float diff = trackTorch(table, 0.1, [&](torch::Tensor& weight, int) {
    if (!sgd) sgd = std::make_unique<torch::optim::SGD>(std::vector{weight}, torch::optim::SGDOptions(0.1));
    sgd->step();
  });
  // Not to the bit: torch's SGD adds an uncoalesced gradient's repeats one
  // at a time (p - lr*g1 - lr*g2), the table their sum, as Adagrad and
  // SparseAdam do after coalesce().
  EXPECT_LE(diff, 1e-6f);
}

TEST(SparseKernels, AdagradMatchesTorchOnASparseGradient) {
  RowTable table(tableOptions("adagrad"));
  std::unique_ptr<torch::optim::Adagrad> adagrad;
  const float diff = trackTorch(table, 0.05, [&](torch::Tensor& weight, int) {
    if (!adagrad) {
      adagrad = std::make_unique<torch::optim::Adagrad>(std::vector{weight}, torch::optim::AdagradOptions(0.05));
    }
    adagrad->step();
  });
  EXPECT_LE(diff, 1e-6f);
}

// torch.optim.SparseAdam's step (torch/optim/sparse_adam.py), in its order.
void sparseAdamStep(torch::Tensor& weight, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq, int step, double lr) {
  torch::NoGradGuard no_grad;
  const double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  torch::Tensor grad = weight.grad().coalesce();
  const torch::Tensor indices = grad._indices();
  const torch::Tensor values = grad._values();
  auto make_sparse = [&](const torch::Tensor& v) { return torch::sparse_coo_tensor(indices, v, weight.sizes()); };
  const torch::Tensor old_exp_avg = exp_avg.sparse_mask(grad)._values();
  torch::Tensor exp_avg_update = values.sub(old_exp_avg).mul_(1 - beta1);
  exp_avg.add_(make_sparse(exp_avg_update));
  const torch::Tensor old_exp_avg_sq = exp_avg_sq.sparse_mask(grad)._values();
  torch::Tensor exp_avg_sq_update = values.pow(2).sub_(old_exp_avg_sq).mul_(1 - beta2);
  exp_avg_sq.add_(make_sparse(exp_avg_sq_update));
  torch::Tensor numer = exp_avg_update.add_(old_exp_avg);
  exp_avg_sq_update.add_(old_exp_avg_sq);
  const torch::Tensor denom = exp_avg_sq_update.sqrt_().add_(eps);
  const double bias_correction1 = 1 - std::pow(beta1, step);
  const double bias_correction2 = 1 - std::pow(beta2, step);
  const double step_size = lr * std::sqrt(bias_correction2) / bias_correction1;
  weight.add_(make_sparse(-step_size * numer.div_(denom)));
}

TEST(SparseKernels, LazyAdamMatchesSparseAdam) {
  RowTable table(tableOptions("adam"));
  torch::Tensor exp_avg = torch::zeros({kRows, kDim}), exp_avg_sq = torch::zeros({kRows, kDim});
  const float diff = trackTorch(table, 0.01, [&](torch::Tensor& weight, int step) {
    sparseAdamStep(weight, exp_avg, exp_avg_sq, step, 0.01);
  });
  EXPECT_LE(diff, 1e-6f);
}

}  // namespace
}  // namespace tandem::ps
