#include "core/wire_encoder.hpp"

#include "core/error.hpp"

namespace tandem {

WireEncoder::WireEncoder(PushFormat format, bool error_feedback, size_t slots)
    : format_(format),
      error_feedback_(error_feedback),
      buffers_(slots),
      values_(slots, 0),
      residuals_(error_feedback ? slots : 0) {
  TANDEM_ENFORCE(!format.raw(), "float32 travels as it is: there is nothing to encode");
}

void* WireEncoder::encode(size_t slot, const float* in, size_t n) {
  if (buffers_.size() <= slot) {
    buffers_.resize(slot + 1);
    values_.resize(slot + 1, 0);
    if (error_feedback_) residuals_.resize(slot + 1);
  }
  auto& buffer = buffers_[slot];
  TANDEM_ENFORCE(buffer.empty() || values_[slot] == n, "wire slot {} held {} values and now gets {}", slot,
                 values_[slot], n);
  buffer.resize((format_.bytes(n) + 1) / 2);
  values_[slot] = n;
  float* residual = nullptr;
  if (error_feedback_) {
    residuals_[slot].resize(n, 0.0f);
    residual = residuals_[slot].data();
  }
  format_.encode(in, residual, buffer.data(), n);
  return buffer.data();
}

}  // namespace tandem
