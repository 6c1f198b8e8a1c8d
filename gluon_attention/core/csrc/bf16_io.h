// bfloat16 tensors in the operators of this library (fused_attention.cc, fused_rowwise.cc).
// MXNet hands a custom operator's InferType the type code of mshadow's bfloat16, 12, which
// lib_api.h's MXDType does not name; lib_api.cc then refuses to build an MXTensor of that code
// for the compute functions ("Invalid dtype flag"). bf16_io.cc therefore sits between MXNet and
// lib_api.cc's _opCallFCompute (compiled under another name, see fused_build.py) and hands a
// bfloat16 tensor over under the code of float16, the other 2-byte type: no operator of this
// library accepts float16 (their InferType refuses it), so in a compute function that code
// means bfloat16, the raw 16 bits of each value.
#ifndef GA_BF16_IO_H_
#define GA_BF16_IO_H_

#include "mxnet/lib_api.h"

namespace ga {

// The type code InferType sees for bfloat16 (mshadow's kBfloat16).
constexpr int kBfloat16Code = 12;
// What a compute function sees for it.
constexpr mxnet::ext::MXDType kBfloat16InCompute = mxnet::ext::kFloat16;

inline bool is_bf16(const mxnet::ext::MXTensor& t) { return t.dtype == kBfloat16InCompute; }
inline const unsigned short* bf16_data(const mxnet::ext::MXTensor& t) {
  return static_cast<const unsigned short*>(t.data_ptr);
}
inline unsigned short* bf16_out(mxnet::ext::MXTensor& t) {
  return static_cast<unsigned short*>(t.data_ptr);
}

}  // namespace ga

#endif  // GA_BF16_IO_H_
