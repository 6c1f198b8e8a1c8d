// float32 -> bfloat16 with the AVX512-BF16 instruction VCVTNEPS2BF16 (16 values per
// instruction, nearest even; NaN made quiet; subnormal inputs taken as 0, the instruction's
// rule). Compiled on its own with -mavx512f -mavx512bw -mavx512vl -mavx512bf16; bf16_io.cc
// chooses it only where the CPU has AVX512-BF16 and the AVX-512 kernels run. A compiler without
// AVX512-BF16 builds the stubs at the end (fused_build.py retries without the flag).
#include "kernel_api.h"

#if defined(__AVX512BF16__)
#include <immintrin.h>

namespace ga_bf16 {

void narrow(const float* src, unsigned short* dst, long n) {
  long i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i x = (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), x);
  }
  if (i < n) {
    const __mmask16 live = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m256i x = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(live, src + i));
    _mm256_mask_storeu_epi16(dst + i, live, x);
  }
}

}  // namespace ga_bf16

void ga::narrow_bf16_native(const float* src, unsigned short* dst, long n) {
  ga_bf16::narrow(src, dst, n);
}
bool ga::bf16_native_compiled() { return true; }
#else
void ga::narrow_bf16_native(const float*, unsigned short*, long) {}
bool ga::bf16_native_compiled() { return false; }
#endif
