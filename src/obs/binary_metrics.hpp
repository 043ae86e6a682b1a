#pragma once
// The metrics of a click model (issue 54): ROC AUC and log loss over
// predicted click probabilities and 0/1 labels. Torch-free and exact: AUC
// by ranking, with tied scores counted half, as scikit-learn's
// roc_auc_score does.
#include <span>

namespace tandem::obs {

// The probability that a random positive scores above a random negative
// (ties: one half). Throws InputError when the lengths differ or one class
// is missing (AUC is undefined then).
double rocAuc(std::span<const float> scores, std::span<const float> labels);

// Mean binary cross-entropy of probabilities `p` (clipped to [eps, 1 - eps],
// eps 1e-7) against labels.
double logLoss(std::span<const float> p, std::span<const float> labels);

}  // namespace tandem::obs
