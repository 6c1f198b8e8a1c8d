// Multiply-accumulate rate of one core: float32 FMA (_mm512_fmadd_ps, 16 products per
// instruction) against AVX512-BF16 pair dot products (_mm512_dpbf16_ps, 32 bfloat16 products
// per instruction, float32 accumulation): the ceiling of a bfloat16 path for the fused
// attention kernel, whose inner loops are such register-tile products.
//
//   g++ -O2 -mavx512f -mavx512bf16 bench/bf16_dot_rate.cc -o build/bf16_dot_rate
//   build/bf16_dot_rate            # prints GMAC/s of each, best of 15 interleaved runs, and their ratio
//
// Twenty-four independent accumulators per loop hide the instructions' latency, as the kernel's
// register tiles do; operands stay in registers (no memory traffic: the rate of the units).
#include <immintrin.h>

#include <chrono>
#include <cstdio>

namespace {

constexpr long kIters = 10000000;
constexpr int kAcc = 24;
constexpr int kRuns = 15;

template <typename Step>
double seconds(Step step) {
  auto start = std::chrono::steady_clock::now();
  step();
  std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  return took.count();
}

float fma_loop() {
  __m512 acc[kAcc];
  __m512 a = _mm512_set1_ps(1.0001f), b = _mm512_set1_ps(0.9999f);
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  for (long it = 0; it < kIters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_fmadd_ps(a, b, acc[i]);
    __asm__ volatile("" : "+v"(a), "+v"(b));
  }
  __m512 sum = acc[0];
  for (int i = 1; i < kAcc; ++i) sum = _mm512_add_ps(sum, acc[i]);
  return _mm512_reduce_add_ps(sum);
}

float dpbf16_loop() {
  __m512 acc[kAcc];
  __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1.0f), _mm512_set1_ps(0.5f));
  __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.25f), _mm512_set1_ps(1.0f));
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  for (long it = 0; it < kIters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    __asm__ volatile("" : "+v"(a), "+v"(b));
  }
  __m512 sum = acc[0];
  for (int i = 1; i < kAcc; ++i) sum = _mm512_add_ps(sum, acc[i]);
  return _mm512_reduce_add_ps(sum);
}

}  // namespace

int main() {
  volatile float sink = 0.0f;
  double fma = 1e30, dp = 1e30;
  for (int run = 0; run < kRuns; ++run) {      // interleaved: both see the same load
    double took = seconds([&] { sink = sink + fma_loop(); });
    fma = took < fma ? took : fma;
    took = seconds([&] { sink = sink + dpbf16_loop(); });
    dp = took < dp ? took : dp;
  }
  double macs = static_cast<double>(kIters) * kAcc;
  double fma_rate = macs * 16 / fma / 1e9, dp_rate = macs * 32 / dp / 1e9;
  std::printf("float32 FMA      %7.1f GMAC/s\n", fma_rate);
  std::printf("bfloat16 DPBF16  %7.1f GMAC/s\n", dp_rate);
  std::printf("ratio bfloat16 / float32: %.2f\n", dp_rate / fma_rate);
  return 0;
}
