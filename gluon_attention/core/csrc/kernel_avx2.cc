// The attention kernels for CPUs with AVX2 and FMA: vectors of 8 floats, 16 registers.
// Compiled on its own with -mavx2 -mfma; the operator uses it when the CPU lacks AVX-512 (or
// GA_FUSED_ISA=avx2 asks for it).
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernel_api.h"

namespace ga_avx2 {

using ga::Kernels;
using ga::Task;
using ga::Workspace;
using ga::ws_floats;

constexpr const char* kIsaName = "avx2";
typedef __m256 vf;
typedef __m256 vmask;    // all-ones lanes where true
constexpr int W = 8;
// Tiles: scores 6 keys x 16 queries (12 accumulators), rows 4 x 24 channels (12).
constexpr int SR = 6, QV = 2, RR = 4, CV = 3;
constexpr int KB = 384, QB = 8;   // keys per block, query panels per block

inline vf vzero() { return _mm256_setzero_ps(); }
inline vf vset(float x) { return _mm256_set1_ps(x); }
inline vf vld(const float* p) { return _mm256_loadu_ps(p); }
inline void vst(float* p, vf x) { _mm256_storeu_ps(p, x); }
inline __m256i lane_mask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline vmask vlive_n(int n) { return _mm256_castsi256_ps(lane_mask(n)); }
inline vf vld_n(const float* p, int n) { return _mm256_maskload_ps(p, lane_mask(n)); }
inline void vst_n(float* p, vf x, int n) { _mm256_maskstore_ps(p, lane_mask(n), x); }
inline vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
inline vf vsub(vf a, vf b) { return _mm256_sub_ps(a, b); }
inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
inline vf vfma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
inline vf vfms(vf a, vf b, vf c) { return _mm256_fmsub_ps(a, b, c); }
inline vf vmax(vf a, vf b) { return _mm256_max_ps(a, b); }
inline vf vdiv(vf a, vf b) { return _mm256_div_ps(a, b); }
// p[0..W) += x, in double
inline void vacc_d(double* p, vf x) {
  const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
  const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
  _mm256_storeu_pd(p, _mm256_add_pd(_mm256_loadu_pd(p), lo));
  _mm256_storeu_pd(p + 4, _mm256_add_pd(_mm256_loadu_pd(p + 4), hi));
}
// a where x >= 0, b elsewhere (NaN x: b)
inline vf vsel_nonneg(vf x, vf a, vf b) {
  return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ));
}
inline float vhsum(vf x) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float vhmax(vf x) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline vmask vlive(const int* lanes, int j) {
  const __m256i len = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lanes));
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(len, _mm256_set1_epi32(j)));
}
inline vf vkeep(vmask m, vf x) { return _mm256_and_ps(m, x); }
inline vf vkeep_or_ninf(vmask m, vf x) {
  return _mm256_blendv_ps(_mm256_set1_ps(-__builtin_inff()), x, m);
}
inline vf vkeep_finite(vf x) {
  return vkeep(_mm256_cmp_ps(x, _mm256_set1_ps(-__builtin_inff()), _CMP_NEQ_OQ), x);
}

// 8 x 8 transpose in registers: 4 x 4 blocks within each 128-bit lane, then the lanes.
inline void vtranspose(vf r[8]) {
  vf s[8];
  for (int g = 0; g < 8; g += 4) {
    const vf t0 = _mm256_unpacklo_ps(r[g], r[g + 1]), t1 = _mm256_unpackhi_ps(r[g], r[g + 1]);
    const vf t2 = _mm256_unpacklo_ps(r[g + 2], r[g + 3]);
    const vf t3 = _mm256_unpackhi_ps(r[g + 2], r[g + 3]);
    s[g] = _mm256_shuffle_ps(t0, t2, 0x44);
    s[g + 1] = _mm256_shuffle_ps(t0, t2, 0xEE);
    s[g + 2] = _mm256_shuffle_ps(t1, t3, 0x44);
    s[g + 3] = _mm256_shuffle_ps(t1, t3, 0xEE);
  }
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm256_permute2f128_ps(s[k], s[4 + k], 0x20);
    r[4 + k] = _mm256_permute2f128_ps(s[k], s[4 + k], 0x31);
  }
}

inline vf vround(vf x) {
  return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
// p 2^n for p in [1/2, 2] and integral n in [kExp2Min, 127], rounded once, as vscalefps does on
// the AVX-512 path: gradual underflow (subnormal results; 0 below about 2^-150). For n >= -126
// 2^n is built from the exponent bits and the product is exact; below, p 2^(n + 64) is exact and
// normal, and the one rounding comes with the factor 2^-64. The thread's MXCSR is not touched
// (with FTZ set by the caller, subnormal results become 0 on both paths).
constexpr float kExp2Min = -160.0f;
inline vf vpow2(vf n) {  // 2^n for integral n in [-126, 127]
  return _mm256_castsi256_ps(_mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
inline vf vldexp(vf p, vf n) {
  const vf low = _mm256_cmp_ps(n, _mm256_set1_ps(-126.0f), _CMP_LT_OQ);
  const vf exact = _mm256_mul_ps(p, vpow2(_mm256_add_ps(n, _mm256_and_ps(low, vset(64.0f)))));
  return _mm256_mul_ps(exact, _mm256_blendv_ps(vset(1.0f), vset(0x1p-64f), low));
}

#include "kernel_body.inc"
#include "rowwise_body.inc"
#include "bf16_body.inc"

const Kernels kKernels = {kIsaName, forward, backward, add_layer_norm, add_layer_norm_backward,
                          bias_gelu, bias_gelu_backward, widen_bf16, narrow_bf16};

}  // namespace ga_avx2

const ga::Kernels& ga::kernels_avx2() { return ga_avx2::kKernels; }
