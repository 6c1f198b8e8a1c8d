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
typedef __m512 vf;
typedef __mmask16 vmask;
constexpr int W = 16;
// Tiles: scores 12 keys x 32 queries (24 accumulators), rows 4 x 64 channels (16).
constexpr int SR = 12, QV = 2, RR = 4, CV = 4;
constexpr int KB = 384, QB = 4;   // keys per block, query panels per block

inline vf vzero() { return _mm512_setzero_ps(); }
inline vf vset(float x) { return _mm512_set1_ps(x); }
inline vf vld(const float* p) { return _mm512_loadu_ps(p); }
inline void vst(float* p, vf x) { _mm512_storeu_ps(p, x); }
inline vmask vlive_n(int n) { return static_cast<vmask>((1u << n) - 1u); }
inline vf vld_n(const float* p, int n) { return _mm512_maskz_loadu_ps(vlive_n(n), p); }
inline void vst_n(float* p, vf x, int n) { _mm512_mask_storeu_ps(p, vlive_n(n), x); }
inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
inline vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
inline vf vfms(vf a, vf b, vf c) { return _mm512_fmsub_ps(a, b, c); }
inline vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }
inline vf vdiv(vf a, vf b) { return _mm512_div_ps(a, b); }
// p[0..W) += x, in double
inline void vacc_d(double* p, vf x) {
  const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
  const __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1));
  _mm512_storeu_pd(p, _mm512_add_pd(_mm512_loadu_pd(p), lo));
  _mm512_storeu_pd(p + 8, _mm512_add_pd(_mm512_loadu_pd(p + 8), hi));
}
// a where x >= 0, b elsewhere (NaN x: b)
inline vf vsel_nonneg(vf x, vf a, vf b) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ), b, a);
}
inline float vhsum(vf x) { return _mm512_reduce_add_ps(x); }
inline float vhmax(vf x) { return _mm512_reduce_max_ps(x); }
// lanes i with lanes[i] > j (key j is within row i's length)
inline vmask vlive(const int* lanes, int j) {
  return _mm512_cmpgt_epi32_mask(_mm512_loadu_si512(lanes), _mm512_set1_epi32(j));
}
inline vf vkeep(vmask m, vf x) { return _mm512_maskz_mov_ps(m, x); }
inline vf vkeep_or_ninf(vmask m, vf x) {
  return _mm512_mask_mov_ps(_mm512_set1_ps(-__builtin_inff()), m, x);
}
// x where finite, 0 where -inf (a maximum over no key yet)
inline vf vkeep_finite(vf x) {
  return vkeep(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-__builtin_inff()), _CMP_NEQ_OQ), x);
}

// 16 x 16 transpose in registers: 4 x 4 blocks within each 128-bit lane (unpack, shuffle),
// then the 4 x 4 grid of lanes (two rounds of shuffle_f32x4).
inline void vtranspose(vf r[16]) {
  vf s[16];
  for (int g = 0; g < 16; g += 4) {
    const vf t0 = _mm512_unpacklo_ps(r[g], r[g + 1]), t1 = _mm512_unpackhi_ps(r[g], r[g + 1]);
    const vf t2 = _mm512_unpacklo_ps(r[g + 2], r[g + 3]);
    const vf t3 = _mm512_unpackhi_ps(r[g + 2], r[g + 3]);
    s[g] = _mm512_shuffle_ps(t0, t2, 0x44);
    s[g + 1] = _mm512_shuffle_ps(t0, t2, 0xEE);
    s[g + 2] = _mm512_shuffle_ps(t1, t3, 0x44);
    s[g + 3] = _mm512_shuffle_ps(t1, t3, 0xEE);
  }
  for (int k = 0; k < 4; ++k) {
    const vf u0 = _mm512_shuffle_f32x4(s[k], s[4 + k], 0x44);
    const vf u1 = _mm512_shuffle_f32x4(s[k], s[4 + k], 0xEE);
    const vf u2 = _mm512_shuffle_f32x4(s[8 + k], s[12 + k], 0x44);
    const vf u3 = _mm512_shuffle_f32x4(s[8 + k], s[12 + k], 0xEE);
    r[k] = _mm512_shuffle_f32x4(u0, u2, 0x88);
    r[4 + k] = _mm512_shuffle_f32x4(u0, u2, 0xDD);
    r[8 + k] = _mm512_shuffle_f32x4(u1, u3, 0x88);
    r[12 + k] = _mm512_shuffle_f32x4(u1, u3, 0xDD);
  }
}

inline vf vround(vf x) {
  return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
// p 2^n by vscalefps, rounded once: gradual underflow (subnormal results; 2^-160 p rounds to
// exactly 0). The thread's MXCSR is not touched (with FTZ set, subnormal results become 0).
constexpr float kExp2Min = -160.0f;
inline vf vldexp(vf p, vf n) { return _mm512_scalef_ps(p, n); }

#include "kernel_body.inc"
#include "rowwise_body.inc"

const Kernels kKernels = {kIsaName, forward, backward, add_layer_norm, add_layer_norm_backward,
                          bias_gelu, bias_gelu_backward};

}  // namespace ga_avx512

const ga::Kernels& ga::kernels_avx512() { return ga_avx512::kKernels; }
