#include "collective/bucket_reducer.hpp"

#include "core/error.hpp"

namespace tandem::collective {

BucketReducer::BucketReducer(Communicator& comm, WireDtype wire, bool error_feedback)
    : comm_(comm), wire_(wire) {
  if (wire != WireDtype::kFloat32) encoder_.emplace(wire, error_feedback);
}

size_t BucketReducer::reduce(size_t bucket, float* data, size_t count, size_t exact_tail) {
  TANDEM_ENFORCE(exact_tail <= count, "a bucket of {} floats cannot keep {} exact", count, exact_tail);
  if (wire_ == WireDtype::kFloat32) {
    comm_.allreduceSum(data, count);
    return count * sizeof(float);
  }
  const size_t values = count - exact_tail;
  // The bucket's own buffer, the same every step: the communicator's cache
  // keys on the address.
  auto* buffer = static_cast<uint16_t*>(encoder_->encode(bucket, data, values));
  comm_.allreduceSum16(buffer, values, wire_);
  decodeWire(wire_, buffer, data, values);
  if (exact_tail > 0) comm_.allreduceSum(data + values, exact_tail);
  return values * wireBytes(wire_) + exact_tail * sizeof(float);
}

}  // namespace tandem::collective
