#pragma once
// The number format gradients and parameters travel in between processes
// (`tandem train --wire-dtype`, InitOptions::wire_dtype): float32 as
// computed, or rounded to 16 bits. Std-only, so the lowest layers and the
// installed API share it; its names ("fp32", "fp16", "bf16") and the
// conversions are in core/wire_dtype.hpp.

namespace tandem {

enum class WireDtype { kFloat32, kFloat16, kBfloat16 };

}  // namespace tandem
