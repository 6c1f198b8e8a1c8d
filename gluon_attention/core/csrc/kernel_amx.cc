// The forward pass of the attention kernel with bfloat16 products on Intel AMX tiles
// (TDPBF16PS: 16 x 32 bfloat16 times 32 x 16 bfloat16 into 16 x 16 float32). Compiled on its
// own with -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx512bf16 -mamx-tile -mamx-bf16 -mfma;
// the operator calls it only when the CPU has these, Linux granted this process the tile state
// (arch_prctl ARCH_GET_XCOMP_PERM) and the operator's matmul_dtype attribute is bfloat16
// (fused_attention.cc). float32 inputs and outputs: Q, K and V are rounded to bfloat16
// (nearest, ties to even) when packed; bfloat16 ones (Task::qb set) are packed as they are and
// the context rows rounded to bfloat16 when written. The scores accumulate in float32, the
// online softmax runs in float32 (as in kernel_body.inc, but with an exp2 good to 8.6e-5
// relative: the weights P are rounded to bfloat16, up to 2^-8 relative, for P V with float32
// accumulation). The running sums use the unrounded weights. Masking is the float32 kernel's:
// key j counts for query row i only when j < len[i] (weight exactly 0 otherwise), keys at or
// past the group's longest length are never read, a row of length 0 gets a zero context row
// and lse -inf.
//
// Layout of the work: panels of MQ = 32 query rows (two tiles of 16 rows); per key block of KB
// keys, S = Q K^T by 2 x 2 tiles (32 queries x 32 keys per step), the softmax on 16 rows at a
// time (scores stored row-major: keys along the vectors; the rows' maxima and sums folded
// across the 16 rows into one vector, their running statistics updated as vectors), then
// O += P V by 2 x 2 tiles (32 queries x 32 channels), O kept in float32 in the panel's buffer
// between key blocks.
//
// A compiler without these instruction sets (gcc before 11) builds this file without the flags
// (fused_build.py retries so): then only the stubs at the end are compiled, ga::amx_compiled()
// is false and the operator never chooses this path.
#include "kernel_api.h"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__)
#include <immintrin.h>
#include <math.h>
#include <string.h>

namespace ga_amx {

using ga::Task;
using ga::Workspace;
using ga::ws_floats;

#include "avx512_vec.inc"
#include "vexp.inc"

typedef unsigned short bf16;
constexpr int TR = 16;        // rows of a tile; its row is 64 bytes: 16 float32 or 32 bfloat16
constexpr int TE = TR * 32;   // bfloat16 elements of one packed operand tile
constexpr int MQ = 2 * TR;    // query rows per panel
constexpr int KB = 256;       // keys per block of the online softmax (a multiple of 32)
constexpr float kLn2 = 0.693147180559945309f;

struct alignas(64) TileConfig {
  unsigned char palette, start_row, reserved[14];
  unsigned short bytes_per_row[16];
  unsigned char rows[16];
};

// Eight tiles of 16 rows x 64 bytes: 0-3 accumulators, 4-5 left operands, 6-7 right operands.
void configure_tiles() {
  TileConfig cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.palette = 1;
  for (int i = 0; i < 8; ++i) {
    cfg.bytes_per_row[i] = 64;
    cfg.rows[i] = TR;
  }
  // gcc 12 does not count _tile_loadconfig as a read of cfg (the stores above were dropped
  // without this barrier, leaving every tile unconfigured: SIGILL at the first tile use)
  __asm__ __volatile__("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

// 32 float32 (lo: elements 0-15, hi: 16-31) rounded to bfloat16, nearest even.
inline __m512i to_bf16(vf lo, vf hi) {
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}
// n floats of p (0 <= n, at most W read), zero past them.
inline vf ld_part(const float* p, int n) {
  return n <= 0 ? vzero() : n >= W ? vld(p) : vld_n(p, n);
}
// 32 floats of a row from column c0 (cols in all), rounded to bfloat16.
inline __m512i row_bf16(const float* row, int c0, int cols) {
  return to_bf16(ld_part(row + c0, cols - c0), ld_part(row + c0 + W, cols - c0 - W));
}
// 32 bfloat16 of a row from column c0 (cols in all), zero past them.
inline __m512i row_bf16(const bf16* row, int c0, int cols) {
  const int n = cols - c0;
  if (n >= 32) return _mm512_loadu_si512(row + c0);
  if (n <= 0) return _mm512_setzero_si512();
  return _mm512_maskz_loadu_epi16(static_cast<__mmask32>((1ull << n) - 1), row + c0);
}
// The first n (at most 16 read) values of rows a and b as bfloat16, a's in the low half, b's in
// the high half; zero past them and for a missing (nullptr) row.
inline __m512i two_rows(const float* a, const float* b, int n) {
  return to_bf16(a ? ld_part(a, n) : vzero(), b ? ld_part(b, n) : vzero());
}
inline __m512i two_rows(const bf16* a, const bf16* b, int n) {
  const __mmask16 live = n >= TR ? 0xFFFF : n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1);
  const __m256i lo = a ? _mm256_maskz_loadu_epi16(live, a) : _mm256_setzero_si256();
  const __m256i hi = b ? _mm256_maskz_loadu_epi16(live, b) : _mm256_setzero_si256();
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
// The first n (at most W) values of x into a context row of float32 or of bfloat16 (rounded).
inline void put_row(float* out, vf x, int n) {
  if (n >= W) vst(out, x); else vst_n(out, x, n);
}
inline void put_row(bf16* out, vf x, int n) {
  const __m256i h = (__m256i)_mm512_cvtneps_pbh(x);
  if (n >= W) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), h);
  else _mm256_mask_storeu_epi16(out, static_cast<__mmask16>((1u << n) - 1), h);
}

// Query panel: dst[r * cpad + c] = q[r][c] for live rows r < nq (lanes[r] > 0), else 0;
// negated (exactly) when `negate`, so that the scores come out negated and a negative scale
// can be applied as a positive one.
template <typename T>
void pack_queries(const T* q, long qs, int nq, const int* lanes, int c, int cpad, bool negate,
                  bf16* dst) {
  const __m512i sign = _mm512_set1_epi16(negate ? static_cast<short>(0x8000) : 0);
  for (int r = 0; r < MQ; ++r) {
    const bool live = r < nq && lanes[r] > 0;
    for (int c0 = 0; c0 < cpad; c0 += 32) {
      const __m512i x = live ? row_bf16(q + r * qs, c0, c) : _mm512_setzero_si512();
      _mm512_storeu_si512(dst + static_cast<long>(r) * cpad + c0, _mm512_xor_si512(x, sign));
    }
  }
}

// Keys as right operands of S = Q K^T (pairs of channels, VNNI order): tile (kt, s) holds, in
// row p, the pairs (k[16 kt + n][32 s + 2p], k[16 kt + n][32 s + 2p + 1]) for n < 16; rows at or
// past n_keys are zero. A 16 x 16 transpose of 32-bit pairs.
template <typename T>
void pack_keys(const T* k, long ks, int n_keys, int npad, int c, int cpad, bf16* dst) {
  const int steps = cpad / 32;
  vf blk[W];
  for (int kt = 0; kt < npad / TR; ++kt) {
    for (int s = 0; s < steps; ++s) {
      for (int n = 0; n < TR; ++n) {
        const int key = kt * TR + n;
        blk[n] = key < n_keys ? _mm512_castsi512_ps(row_bf16(k + key * ks, 32 * s, c))
                              : vzero();
      }
      vtranspose(blk);
      bf16* d = dst + (static_cast<long>(kt) * steps + s) * TE;
      for (int p = 0; p < TR; ++p) vst(reinterpret_cast<float*>(d + p * 32), blk[p]);
    }
  }
}

// Values as right operands of O = P V: tile (u, w) holds, in row p, the pairs
// (v[32 u + 2p][16 w + n], v[32 u + 2p + 1][16 w + n]) for n < 16; rows at or past n_keys and
// columns past cv are zero.
template <typename T>
void pack_values(const T* v, long vs, int n_keys, int npad, int cv, int cvp, bf16* dst) {
  const int wt = cvp / TR;
  alignas(64) static const unsigned short kInterleave[32] = {
      0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(kInterleave);
  for (int u = 0; u < npad / 32; ++u) {
    for (int w = 0; w < wt; ++w) {
      bf16* d = dst + (static_cast<long>(u) * wt + w) * TE;
      for (int p = 0; p < TR; ++p) {
        const int j = 32 * u + 2 * p;
        const T* a = j < n_keys ? v + j * vs + TR * w : nullptr;
        const T* b = j + 1 < n_keys ? v + (j + 1) * vs + TR * w : nullptr;
        const __m512i pair = two_rows(a, b, cv - TR * w);
        _mm512_storeu_si512(d + p * 32, _mm512_permutexvar_epi16(idx, pair));
      }
    }
  }
}

// s (MQ x KB, row-major) = Q K^T for the keys [j0, j0 + keys), keys a multiple of 32.
void score_block(const bf16* qb, const bf16* kb, int cpad, int j0, int keys, float* s) {
  const int steps = cpad / 32;
  const long qstride = cpad * 2L, sstride = KB * 4L;
  for (int jj = 0; jj < keys; jj += 32) {
    const bf16* k0 = kb + static_cast<long>((j0 + jj) / TR) * steps * TE;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int st = 0; st < steps; ++st) {
      _tile_loadd(4, qb + st * 32, qstride);
      _tile_loadd(5, qb + TR * cpad + st * 32, qstride);
      _tile_loadd(6, k0 + st * TE, 64);
      _tile_loadd(7, k0 + (steps + st) * TE, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, s + jj, sstride);
    _tile_stored(1, s + jj + TR, sstride);
    _tile_stored(2, s + TR * KB + jj, sstride);
    _tile_stored(3, s + TR * KB + jj + TR, sstride);
  }
}

// o (MQ x cvp float32, row-major) += P V for the keys [j0, j0 + keys), P: MQ x KB bfloat16.
void context_block(const bf16* pb, const bf16* vb, int cvp, int j0, int keys, float* o) {
  const int wt = cvp / TR;
  const long ostride = cvp * 4L, pstride = KB * 2L;
  for (int w = 0; w < wt; w += 2) {
    float* o0 = o + w * TR;
    _tile_loadd(0, o0, ostride);
    _tile_loadd(1, o0 + TR, ostride);
    _tile_loadd(2, o0 + TR * cvp, ostride);
    _tile_loadd(3, o0 + TR * cvp + TR, ostride);
    for (int jj = 0; jj < keys; jj += 32) {
      const bf16* v0 = vb + (static_cast<long>((j0 + jj) / 32) * wt + w) * TE;
      _tile_loadd(4, pb + jj, pstride);
      _tile_loadd(5, pb + TR * KB + jj, pstride);
      _tile_loadd(6, v0, 64);
      _tile_loadd(7, v0 + TE, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, o0, ostride);
    _tile_stored(1, o0 + TR, ostride);
    _tile_stored(2, o0 + TR * cvp, ostride);
    _tile_stored(3, o0 + TR * cvp + TR, ostride);
  }
}

#include "amx_softmax.inc"

// Scratch of one task: packed operands, the block of scores and weights, the panel's state.
struct Buffers {
  bf16 *kb, *vb, *qb, *pb;
  float *s, *o, *m, *l;
  int* lanes;
  int npad, cpad, cvp;
};

bool buffers(const Task& t, Workspace* ws, Buffers* b) {
  b->npad = static_cast<int>(round_up(t.n, 32));
  b->cpad = static_cast<int>(round_up(t.c, 32));
  b->cvp = static_cast<int>(round_up(t.cv, 32));
  const long npad = b->npad;
  b->kb = reinterpret_cast<bf16*>(ws_floats(ws, 0, npad * b->cpad / 2));
  b->vb = reinterpret_cast<bf16*>(ws_floats(ws, 1, npad * b->cvp / 2));
  b->qb = reinterpret_cast<bf16*>(ws_floats(ws, 2, MQ * b->cpad / 2));
  b->pb = reinterpret_cast<bf16*>(ws_floats(ws, 3, MQ * KB / 2));
  b->s = ws_floats(ws, 4, MQ * KB);
  b->o = ws_floats(ws, 5, static_cast<long>(MQ) * b->cvp);
  b->m = ws_floats(ws, 6, 3 * MQ);
  if (!b->kb || !b->vb || !b->qb || !b->pb || !b->s || !b->o || !b->m) return false;
  b->l = b->m + MQ;
  b->lanes = reinterpret_cast<int*>(b->m + 2 * MQ);
  return true;
}

// Context rows (ctx, float32 or bfloat16) and lse of the panel's nq rows from its state.
template <typename T>
void finish_panel(const Task& t, const Buffers& b, T* ctx, int i0, int nq) {
  for (int i = 0; i < nq; ++i) {
    T* out = ctx + (i0 + i) * t.cs;
    if (b.l[i] > 0.0f) {
      const vf inv = vset(1.0f / b.l[i]);
      const float* o = b.o + static_cast<long>(i) * b.cvp;
      for (int c = 0; c < t.cv; c += W) put_row(out + c, vmul(vld(o + c), inv), t.cv - c);
      t.lse[i0 + i] = (b.m[i] + log2f(b.l[i])) * kLn2;
    } else {
      memset(out, 0, t.cv * sizeof(T));
      t.lse[i0 + i] = ninf();
    }
  }
}

// Rows (float32 or bfloat16) into the second-level cache ahead of their use: the next panel's
// queries and this panel's context rows (each 3-4% of the time at L_q = L_m = 384 when left to
// wait), spread over the panel's key blocks (a burst of them stalls on the line fill buffers):
// rows [r0, r1) of `rows` at block j0 of `most` keys.
template <typename T>
inline void prefetch_rows(const T* p, long ld, int rows, int cols, int j0, int most) {
  constexpr int kLine = 64 / static_cast<int>(sizeof(T));
  const int blocks = (most + KB - 1) / KB, k = j0 / KB;
  for (int r = rows * k / blocks; r < rows * (k + 1) / blocks; ++r)
    for (int c = 0; c < cols; c += kLine)
      _mm_prefetch(reinterpret_cast<const char*>(p + r * ld + c), _MM_HINT_T1);
}

// The query rows [i0, i0 + nq) (of q) against every key they attend, into ctx.
template <typename T>
void forward_panel(const Task& t, const Buffers& b, const T* q, T* ctx, int i0, int nq) {
  int most = 0;
  for (int r = 0; r < MQ; ++r) {
    b.lanes[r] = r < nq ? t.len[i0 + r] : 0;
    most = imax(most, b.lanes[r]);
    b.m[r] = ninf();
    b.l[r] = 0.0f;
  }
  memset(b.o, 0, static_cast<long>(MQ) * b.cvp * sizeof(float));
  pack_queries(q + i0 * t.qs, t.qs, nq, b.lanes, t.c, b.cpad, t.scale < 0.0f, b.qb);
  const float sc = (t.scale < 0.0f ? -t.scale : t.scale) * kLog2e;
  for (int j0 = 0; j0 < most; j0 += KB) {
    const int keys = static_cast<int>(round_up(imin(KB, most - j0), 32));
    prefetch_rows(q + (i0 + nq) * t.qs, t.qs, imin(MQ, t.lq - i0 - nq), t.c, j0, most);
    prefetch_rows(ctx + i0 * t.cs, t.cs, nq, t.cv, j0, most);
    score_block(b.qb, b.kb, b.cpad, j0, keys, b.s);
    int live[MQ];
    for (int r = 0; r < MQ; ++r) live[r] = imin(b.lanes[r] - j0, keys);
    for (int r = 0; r < MQ; r += TR) {
      const Rows st{b.m + r, b.l + r, b.o + static_cast<long>(r) * b.cvp, b.cvp};
      softmax_rows(b.s + r * KB, live + r, keys, sc, st, b.pb + r * KB);
    }
    context_block(b.pb, b.vb, b.cvp, j0, keys, b.o);
  }
  finish_panel(t, b, ctx, i0, nq);
}

// The forward pass of one group (t.heads == 1) on rows of T (float32 or bfloat16); false
// when scratch memory could not be had.
template <typename T>
bool forward_rows(const Task& t, Workspace* ws, const T* q, const T* k, const T* v, T* ctx) {
  if (t.n == 0) {
    for (int i = 0; i < t.lq; ++i) {
      memset(ctx + i * t.cs, 0, t.cv * sizeof(T));
      t.lse[i] = ninf();
    }
    return true;
  }
  Buffers b;
  if (!buffers(t, ws, &b)) return false;
  pack_keys(k, t.ks, t.n, b.npad, t.c, b.cpad, b.kb);
  pack_values(v, t.vs, t.n, b.npad, t.cv, b.cvp, b.vb);
  configure_tiles();
  for (int i0 = 0; i0 < t.lq; i0 += MQ) forward_panel(t, b, q, ctx, i0, imin(MQ, t.lq - i0));
  _tile_release();
  return true;
}

bool forward(const Task& t, Workspace* ws) {
  return t.qb ? forward_rows(t, ws, t.qb, t.kb, t.vb, t.ctxb)
              : forward_rows(t, ws, t.q, t.k, t.v, t.ctx);
}

}  // namespace ga_amx

bool ga::forward_amx_bf16(const Task& task, Workspace* ws) { return ga_amx::forward(task, ws); }
bool ga::amx_compiled() { return true; }
#else
bool ga::forward_amx_bf16(const Task&, Workspace*) { return false; }
bool ga::amx_compiled() { return false; }
#endif
