// The attention kernels for CPUs with AVX-512 (F, BW, DQ, VL): vectors of 16 floats, 32
// registers. Compiled on its own with -mavx512f -mavx512bw -mavx512dq -mavx512vl -mfma; the
// operator calls it only after checking the CPU for these (fused_attention.cc).
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernel_api.h"

namespace ga_avx512 {

using ga::Kernels;
using ga::Task;
using ga::Workspace;
using ga::ws_floats;

constexpr const char* kIsaName = "avx512";
// Tiles: scores 12 keys x 32 queries (24 accumulators), rows 4 x 64 channels (16).
constexpr int SR = 12, QV = 2, RR = 4, CV = 4;
constexpr int KB = 384, QB = 4;   // keys per block, query panels per block

#include "avx512_vec.inc"
#include "kernel_body.inc"
#include "rowwise_body.inc"
#include "bf16_body.inc"

const Kernels kKernels = {kIsaName, forward, backward, add_layer_norm, add_layer_norm_backward,
                          bias_gelu, bias_gelu_backward, widen_bf16, narrow_bf16};

}  // namespace ga_avx512

const ga::Kernels& ga::kernels_avx512() { return ga_avx512::kKernels; }
