#include "core/wire_encoder.hpp"

#include "core/error.hpp"

namespace tandem {

WireEncoder::WireEncoder(WireDtype wire, bool error_feedback, size_t slots)
    : wire_(wire), error_feedback_(error_feedback), buffers_(slots), residuals_(error_feedback ? slots : 0) {
  TANDEM_ENFORCE(wire != WireDtype::kFloat32, "float32 travels as it is: there is nothing to encode");
}

uint16_t* WireEncoder::encode(size_t slot, const float* in, size_t n) {
  if (buffers_.size() <= slot) {
    buffers_.resize(slot + 1);
    if (error_feedback_) residuals_.resize(slot + 1);
  }
  auto& buffer = buffers_[slot];
  TANDEM_ENFORCE(buffer.empty() || buffer.size() == n, "wire slot {} held {} values and now gets {}", slot,
                 buffer.size(), n);
  buffer.resize(n);
  if (error_feedback_) {
    residuals_[slot].resize(n, 0.0f);
    encodeWireWithFeedback(wire_, in, residuals_[slot].data(), buffer.data(), n);
  } else {
    encodeWire(wire_, in, buffer.data(), n);
  }
  return buffer.data();
}

}  // namespace tandem
