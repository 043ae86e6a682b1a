#include "collective/bucket_reducer.hpp"

#include "core/error.hpp"

namespace tandem::collective {

BucketReducer::BucketReducer(Communicator& comm, WireDtype wire, bool error_feedback)
    : comm_(comm), wire_(wire), error_feedback_(error_feedback && wire != WireDtype::kFloat32) {}

size_t BucketReducer::reduce(size_t bucket, float* data, size_t count, size_t exact_tail) {
  TANDEM_ENFORCE(exact_tail <= count, "a bucket of {} floats cannot keep {} exact", count, exact_tail);
  if (wire_ == WireDtype::kFloat32) {
    comm_.allreduceSum(data, count);
    return count * sizeof(float);
  }
  if (buffers_.size() <= bucket) {
    buffers_.resize(bucket + 1);
    residuals_.resize(bucket + 1);
  }
  const size_t values = count - exact_tail;
  auto& buffer = buffers_[bucket];
  buffer.resize(values);  // same size every step: the communicator's cache keys on the address
  if (error_feedback_) {
    residuals_[bucket].resize(values, 0.0f);
    encodeWireWithFeedback(wire_, data, residuals_[bucket].data(), buffer.data(), values);
  } else {
    encodeWire(wire_, data, buffer.data(), values);
  }
  comm_.allreduceSum16(buffer.data(), values, wire_);
  decodeWire(wire_, buffer.data(), data, values);
  if (exact_tail > 0) comm_.allreduceSum(data + values, exact_tail);
  return values * wireBytes(wire_) + exact_tail * sizeof(float);
}

}  // namespace tandem::collective
