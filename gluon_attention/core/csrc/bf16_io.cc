// bfloat16 tensors through MXNet 1.9.1's custom-operator interface (see bf16_io.h), and the
// bfloat16 conversions chosen for this CPU. Compiled for any x86-64 CPU.
#include <cstring>
#include <vector>

#include "bf16_io.h"
#include "kernel_api.h"

using namespace mxnet::ext;

// lib_api.cc's _opCallFCompute, compiled under this name (fused_build.py).
extern "C" decltype(_opCallFCompute) ga_lib_api_fcompute;

namespace {

std::vector<int> with_bf16_passed(const int* types, int n) {
  std::vector<int> out(types, types + n);
  for (int& t : out)
    if (t == ga::kBfloat16Code) t = ga::kBfloat16InCompute;
  return out;
}

}  // namespace

// What MXNet calls for every forward and backward pass of this library's operators: the same
// arguments, bfloat16 type codes replaced by kBfloat16InCompute.
extern "C" int _opCallFCompute(
    fcomp_t fcomp, const char* const* keys, const char* const* vals, int num,
    const int64_t** inshapes, int* indims, void** indata, int* intypes, size_t* inIDs,
    const char** indev_type, int* indev_id, int num_in, const int64_t** outshapes, int* outdims,
    void** outdata, int* outtypes, size_t* outIDs, const char** outdev_type, int* outdev_id,
    int num_out, xpu_malloc_t cpu_malloc, void* cpu_alloc, xpu_malloc_t gpu_malloc,
    void* gpu_alloc, void* cuda_stream, sparse_malloc_t sparse_malloc, void* sparse_alloc,
    int* instypes, int* outstypes, void** in_indices, void** out_indices, void** in_indptr,
    void** out_indptr, int64_t* in_indices_shapes, int64_t* out_indices_shapes,
    int64_t* in_indptr_shapes, int64_t* out_indptr_shapes, void* rng_cpu_states,
    void* rng_gpu_states) {
  std::vector<int> in = with_bf16_passed(intypes, num_in);
  std::vector<int> out = with_bf16_passed(outtypes, num_out);
  return ga_lib_api_fcompute(
      fcomp, keys, vals, num, inshapes, indims, indata, in.data(), inIDs, indev_type, indev_id,
      num_in, outshapes, outdims, outdata, out.data(), outIDs, outdev_type, outdev_id, num_out,
      cpu_malloc, cpu_alloc, gpu_malloc, gpu_alloc, cuda_stream, sparse_malloc, sparse_alloc,
      instypes, outstypes, in_indices, out_indices, in_indptr, out_indptr, in_indices_shapes,
      out_indices_shapes, in_indptr_shapes, out_indptr_shapes, rng_cpu_states, rng_gpu_states);
}

const ga::Bf16Convert& ga::bf16_convert() {
  static const ga::Bf16Convert chosen = [] {
    const ga::Kernels* kern = ga::chosen_kernels();
    if (!kern) return ga::Bf16Convert{"", nullptr, nullptr};
    __builtin_cpu_init();
    if (std::strcmp(kern->name, "avx512") == 0 && ga::bf16_native_compiled() &&
        __builtin_cpu_supports("avx512bf16"))
      return ga::Bf16Convert{"avx512bf16", kern->widen_bf16, ga::narrow_bf16_native};
    return ga::Bf16Convert{kern->name, kern->widen_bf16, kern->narrow_bf16};
  }();
  return chosen;
}

// For gluon_attention.core.fused_library (ctypes): which conversions run ("" without kernels).
extern "C" const char* ga_bf16_convert_isa() { return ga::bf16_convert().name; }
