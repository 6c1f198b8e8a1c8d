// Fused multi-head scaled dot-product attention for MXNet 1.9.1 (CPU, float32), loaded with
// mx.library.load. One pass per (batch, head) and block of query rows: the scores of that block
// stay in a per-thread buffer (block_rows x L_m), softmax over the valid keys, times the values;
// the backward pass recomputes the block's weights from the saved log-sum-exp (the
// FlashAttention scheme, Dao et al. 2022, arXiv:2205.14135) instead of storing B*K*L_q*L_m
// weights. GEMMs: packed panels and a 6x16 AVX2/FMA register tile (the GotoBLAS/BLIS
// structure, Goto & van de Geijn 2008).
//
// Operator ga_fused_attention
//   inputs : query, key, value in `layout` (NKT (B,K,L,C) | NTK (B,L,K,C) | TNK (L,B,K,C)),
//            and, when with_length=1 (the default), length (B,) or (B, L_q) float32: query row
//            i of sequence b attends keys j < length[b] (or length[b, i]), clipped to
//            [0, L_m]; 0 gives a zero context row and zero gradients. Without it every key.
//   attrs  : layout, scale (multiplies the scores before the softmax), with_length (0 or 1).
//   outputs: context (B, L_q, K*C_v) for NKT/NTK, (L_q, B, K*C_v) for TNK (head-major merge),
//            lse (B, K, L_q) float32, the log-sum-exp of each row's scaled scores (-inf for an
//            empty row).
// Keys at or past a row's length are never read for that row's weights: their weights are
// exactly 0 and NaN there cannot leak (as with MXNet's length softmax).
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "mxnet/lib_api.h"

using namespace mxnet::ext;

namespace {

constexpr int MR = 6;         // rows of the register tile
constexpr int NR = 16;        // columns of the register tile (two AVX registers)
constexpr int KC = 256;       // depth of one packed slab
constexpr int BLOCK = 96;     // query rows per block (a multiple of MR)

// ---------------------------------------------------------------------------------------------
// Aligned scratch memory, one set per worker thread.
struct Buffer {
  float* ptr = nullptr;
  size_t cap = 0;
  ~Buffer() { std::free(ptr); }
  float* get(size_t n) {
    if (n > cap) {
      std::free(ptr);
      cap = (n + 15) / 16 * 16;
      ptr = static_cast<float*>(std::aligned_alloc(64, cap * sizeof(float)));
      if (!ptr) {
        cap = 0;
        throw std::bad_alloc();
      }
    }
    return ptr;
  }
};

// ---------------------------------------------------------------------------------------------
// exp on 8 floats: Cephes-style range reduction x = n ln2 + r, degree-5 polynomial for e^r,
// 2^n from the exponent bits. Relative error about 2e-7 on [-87, 88]; below -87.3 it returns 0.
inline __m256 exp8(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.3762626647949f);
  const __m256 lo = _mm256_set1_ps(-87.3365447505531f);
  __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  __m256 fx = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f));
  fx = _mm256_floor_ps(fx);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  __m256 x2 = _mm256_mul_ps(x, x);
  y = _mm256_fmadd_ps(y, x2, _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  __m256i n = _mm256_cvttps_epi32(fx);
  n = _mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23);
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(n));
  return _mm256_andnot_ps(under, y);
}

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hmax8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// ---------------------------------------------------------------------------------------------
// Packing. A logical matrix X (rows x cols) is read at X[r * rs + c * cs].
// pack_a: panels of MR rows; panel p holds cols x MR floats, column-major within the panel;
//         rows past `rows` are zero. `zero_row` (optional) zeroes rows whose flag is set.
// pack_b: panels of NR columns; panel p holds rows x NR floats; columns past `cols` are zero.
void pack_a(int rows, int cols, const float* x, long rs, long cs, float* dst,
            const unsigned char* zero_row = nullptr) {
  for (int p = 0; p < rows; p += MR) {
    int mr = std::min(MR, rows - p);
    float* d = dst + static_cast<long>(p) * cols;
    if (cs == 1) {
      for (int r = 0; r < MR; ++r) {
        bool live = r < mr && !(zero_row && zero_row[p + r]);
        const float* src = x + (p + r) * rs;
        for (int c = 0; c < cols; ++c) d[c * MR + r] = live ? src[c] : 0.0f;
      }
    } else {
      for (int c = 0; c < cols; ++c) {
        const float* src = x + c * cs + p * rs;
        for (int r = 0; r < MR; ++r)
          d[c * MR + r] = (r < mr && !(zero_row && zero_row[p + r])) ? src[r * rs] : 0.0f;
      }
    }
  }
}

void pack_b(int rows, int cols, const float* x, long rs, long cs, float* dst,
            const unsigned char* zero_row = nullptr) {
  for (int p = 0; p < cols; p += NR) {
    int nr = std::min(NR, cols - p);
    float* d = dst + static_cast<long>(p) * rows;
    for (int r = 0; r < rows; ++r) {
      float* dr = d + r * NR;
      if (zero_row && zero_row[r]) {
        for (int c = 0; c < NR; ++c) dr[c] = 0.0f;
        continue;
      }
      const float* src = x + r * rs + p * cs;
      if (cs == 1 && nr == NR) {
        std::memcpy(dr, src, NR * sizeof(float));
      } else {
        for (int c = 0; c < NR; ++c) dr[c] = c < nr ? src[c * cs] : 0.0f;
      }
    }
  }
}

// C[0:mr, 0:nr] (=|+=) alpha * A_panel(k x MR)^T-ish * B_panel(k x NR): the 6x16 register tile.
inline void tile(int k, const float* a, const float* b, float* c, long ldc, int mr, int nr,
                 float alpha, bool accumulate) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
  __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
  __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
  __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
  __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  for (int p = 0; p < k; ++p) {
    __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
    __m256 a0 = _mm256_broadcast_ss(a), a1 = _mm256_broadcast_ss(a + 1);
    c00 = _mm256_fmadd_ps(a0, b0, c00); c01 = _mm256_fmadd_ps(a0, b1, c01);
    c10 = _mm256_fmadd_ps(a1, b0, c10); c11 = _mm256_fmadd_ps(a1, b1, c11);
    a0 = _mm256_broadcast_ss(a + 2); a1 = _mm256_broadcast_ss(a + 3);
    c20 = _mm256_fmadd_ps(a0, b0, c20); c21 = _mm256_fmadd_ps(a0, b1, c21);
    c30 = _mm256_fmadd_ps(a1, b0, c30); c31 = _mm256_fmadd_ps(a1, b1, c31);
    a0 = _mm256_broadcast_ss(a + 4); a1 = _mm256_broadcast_ss(a + 5);
    c40 = _mm256_fmadd_ps(a0, b0, c40); c41 = _mm256_fmadd_ps(a0, b1, c41);
    c50 = _mm256_fmadd_ps(a1, b0, c50); c51 = _mm256_fmadd_ps(a1, b1, c51);
    a += MR;
    b += NR;
  }
  const __m256 al = _mm256_set1_ps(alpha);
  __m256 acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  if (nr == NR) {
    for (int r = 0; r < mr; ++r) {
      float* cr = c + r * ldc;
      __m256 v0 = _mm256_mul_ps(acc[r][0], al), v1 = _mm256_mul_ps(acc[r][1], al);
      if (accumulate) {
        v0 = _mm256_add_ps(v0, _mm256_loadu_ps(cr));
        v1 = _mm256_add_ps(v1, _mm256_loadu_ps(cr + 8));
      }
      _mm256_storeu_ps(cr, v0);
      _mm256_storeu_ps(cr + 8, v1);
    }
  } else {
    alignas(32) float tmp[NR];
    for (int r = 0; r < mr; ++r) {
      float* cr = c + r * ldc;
      _mm256_store_ps(tmp, _mm256_mul_ps(acc[r][0], al));
      _mm256_store_ps(tmp + 8, _mm256_mul_ps(acc[r][1], al));
      for (int j = 0; j < nr; ++j) cr[j] = accumulate ? cr[j] + tmp[j] : tmp[j];
    }
  }
}

// C (m x n, leading dimension ldc) (=|+=) alpha * A (m x k) * B (k x n); A packed over k rows
// by pack_a, B packed by pack_b over bk >= k rows (its first k rows are used).
void gemm_packed(int m, int n, int k, const float* ap, const float* bp, float* c, long ldc,
                 float alpha, bool accumulate, int bk = -1) {
  if (bk < 0) bk = k;
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate)
      for (int i = 0; i < m; ++i) std::memset(c + i * ldc, 0, n * sizeof(float));
    return;
  }
  for (int pc = 0; pc < k; pc += KC) {
    int kc = std::min(KC, k - pc);
    bool acc = accumulate || pc > 0;
    for (int jr = 0; jr < n; jr += NR) {
      const float* b = bp + static_cast<long>(jr) * bk + static_cast<long>(pc) * NR;
      for (int ir = 0; ir < m; ir += MR) {
        const float* a = ap + static_cast<long>(ir) * k + static_cast<long>(pc) * MR;
        tile(kc, a, b, c + ir * ldc + jr, ldc, std::min(MR, m - ir), std::min(NR, n - jr),
             alpha, acc);
      }
    }
  }
}

inline int round_up(int x, int m) { return (x + m - 1) / m * m; }

// ---------------------------------------------------------------------------------------------
// Geometry of one call: per (batch b, head h) group, the base offset and row stride of each
// tensor in its layout.
struct Geometry {
  int B = 0, K = 0, Lq = 0, Lm = 0, C = 0, Cv = 0;
  int layout = 0;  // 0 NKT, 1 NTK, 2 TNK
  // offset of row 0 and row stride of a per-head tensor with L rows and D columns
  long base(int b, int h, int L, int D) const {
    switch (layout) {
      case 0: return (static_cast<long>(b) * K + h) * L * D;
      case 1: return (static_cast<long>(b) * L * K + h) * D;
      default: return (static_cast<long>(b) * K + h) * D;
    }
  }
  long stride(int D) const {
    switch (layout) {
      case 0: return D;
      case 1: return static_cast<long>(K) * D;
      default: return static_cast<long>(B) * K * D;
    }
  }
  // merged context (B, L_q, K*C_v) or (L_q, B, K*C_v)
  long ctx_base(int b, int h) const {
    return layout == 2 ? (static_cast<long>(b) * K + h) * Cv
                       : static_cast<long>(b) * Lq * K * Cv + static_cast<long>(h) * Cv;
  }
  long ctx_stride() const {
    return layout == 2 ? static_cast<long>(B) * K * Cv : static_cast<long>(K) * Cv;
  }
};

int parse_layout(const std::unordered_map<std::string, std::string>& attrs) {
  auto it = attrs.find("layout");
  std::string l = it == attrs.end() ? "NKT" : it->second;
  if (l == "NKT") return 0;
  if (l == "NTK") return 1;
  if (l == "TNK") return 2;
  return -1;
}

float parse_scale(const std::unordered_map<std::string, std::string>& attrs) {
  auto it = attrs.find("scale");
  return it == attrs.end() ? 1.0f : std::stof(it->second);
}

// (B, K, L, C) sizes of a per-head shape in `layout`.
bool per_head_dims(const std::vector<unsigned int>& s, int layout, unsigned int* b,
                   unsigned int* k, unsigned int* l, unsigned int* c) {
  if (s.size() != 4) return false;
  switch (layout) {
    case 0: *b = s[0]; *k = s[1]; *l = s[2]; *c = s[3]; break;
    case 1: *b = s[0]; *l = s[1]; *k = s[2]; *c = s[3]; break;
    default: *l = s[0]; *b = s[1]; *k = s[2]; *c = s[3]; break;
  }
  return true;
}

Geometry geometry(const std::vector<MXTensor>& in, int layout) {
  Geometry g;
  g.layout = layout;
  std::vector<unsigned int> q(in[0].shape.begin(), in[0].shape.end());
  std::vector<unsigned int> k(in[1].shape.begin(), in[1].shape.end());
  std::vector<unsigned int> v(in[2].shape.begin(), in[2].shape.end());
  unsigned int b = 0, h = 0, l = 0, c = 0;
  per_head_dims(q, layout, &b, &h, &l, &c);
  g.B = b; g.K = h; g.Lq = l; g.C = c;
  per_head_dims(k, layout, &b, &h, &l, &c);
  g.Lm = l;
  per_head_dims(v, layout, &b, &h, &l, &c);
  g.Cv = c;
  return g;
}

int num_threads() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  int n = env ? std::atoi(env) : 0;
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, n);
}

// Runs body(group, worker) for group in [0, groups) on up to num_threads() threads. Returns
// false when a worker ran out of memory (the op then fails with a message, not a crash).
template <typename Body>
bool parallel_groups(int groups, Body body) {
  int workers = std::min(num_threads(), groups);
  std::atomic<int> next(0);
  std::atomic<bool> ok(true);
  auto run = [&](int w) {
    try {
      for (int i = next++; i < groups && ok; i = next++) body(i, w);
    } catch (const std::bad_alloc&) {
      ok = false;
    }
  };
  std::vector<std::thread> pool;
  for (int w = 1; w < workers; ++w) pool.emplace_back(run, w);
  run(0);
  for (auto& t : pool) t.join();
  return ok;
}

// The optional length input: none (every key), (B,) or (B, L_q).
struct Lengths {
  const float* data = nullptr;
  bool per_row = false;
};

Lengths lengths_of(const std::vector<MXTensor>& in, size_t index, bool present) {
  Lengths out;
  if (present) {
    out.data = static_cast<const float*>(in[index].data_ptr);
    out.per_row = in[index].shape.size() == 2;
  }
  return out;
}

// Clipped integer lengths of one group's query rows.
void row_lengths(const Lengths& length, const Geometry& g, int b, int* out) {
  for (int i = 0; i < g.Lq; ++i) {
    if (!length.data) {
      out[i] = g.Lm;
      continue;
    }
    float x = length.data[length.per_row ? static_cast<long>(b) * g.Lq + i : b];
    int n = std::isnan(x) ? 0 : static_cast<int>(std::floor(std::min(x, 2e9f)));
    out[i] = std::min(std::max(n, 0), g.Lm);
  }
}

bool with_length(const std::unordered_map<std::string, std::string>& attrs) {
  auto it = attrs.find("with_length");
  return it == attrs.end() || it->second != "0";
}

// Row-wise softmax pieces on a block of scores s (rows x ld), valid columns [0, len[r]):
// s <- exp(s - max) on the valid columns, 0 past them; returns sum and max per row.
void exp_rows(float* s, long ld, int rows, int cols, const int* len, float* row_max,
              float* row_sum) {
  for (int r = 0; r < rows; ++r) {
    float* x = s + r * ld;
    int n = len[r];
    if (n == 0) {
      std::memset(x, 0, cols * sizeof(float));
      row_max[r] = -std::numeric_limits<float>::infinity();
      row_sum[r] = 0.0f;
      continue;
    }
    __m256 vm = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    int j = 0;
    for (; j + 8 <= n; j += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + j));
    float m = hmax8(vm);
    for (; j < n; ++j) m = std::max(m, x[j]);
    const __m256 mm = _mm256_set1_ps(m);
    __m256 vs = _mm256_setzero_ps();
    j = 0;
    for (; j + 8 <= n; j += 8) {
      __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), mm));
      _mm256_storeu_ps(x + j, e);
      vs = _mm256_add_ps(vs, e);
    }
    float sum = hsum8(vs);
    if (j < n) {
      alignas(32) float tmp[8] = {0};
      for (int t = 0; t < n - j; ++t) tmp[t] = x[j + t] - m;
      for (int t = n - j; t < 8; ++t) tmp[t] = -1e30f;
      _mm256_store_ps(tmp, exp8(_mm256_load_ps(tmp)));
      for (int t = 0; t < n - j; ++t) { x[j + t] = tmp[t]; sum += tmp[t]; }
    }
    for (j = n; j < cols; ++j) x[j] = 0.0f;
    row_max[r] = m;
    row_sum[r] = sum;
  }
}

struct Scratch {
  Buffer kt, vv, a, s, dp, b2, dk, dv, rows;
  std::vector<int> len;
};

// One (batch, head) group: its rows' clipped lengths (in sc.len), the longest (lm: keys at or
// past it are never read), and the offsets of its rows in each tensor.
struct Group {
  int lm;
  long q, k, v, ctx, rows;
};

Group group_of(const Geometry& g, int group, const Lengths& length, Scratch* sc) {
  int b = group / g.K, h = group % g.K;
  sc->len.resize(g.Lq);
  row_lengths(length, g, b, sc->len.data());
  Group out;
  out.lm = g.Lq ? *std::max_element(sc->len.begin(), sc->len.end()) : 0;
  out.q = g.base(b, h, g.Lq, g.C);
  out.k = g.base(b, h, g.Lm, g.C);
  out.v = g.base(b, h, g.Lm, g.Cv);
  out.ctx = g.ctx_base(b, h);
  out.rows = static_cast<long>(group) * g.Lq;
  return out;
}

MXReturnValue finish(bool done) {
  if (done) return MX_SUCCESS;
  MX_ERROR_MSG << "ga_fused_attention: out of memory for the per-thread block buffers";
  return MX_FAIL;
}

// Runs body(group, scratch) for every (batch, head) group on the worker threads: the per-thread
// scratch and each group's lengths and offsets (Group) are set up here for both passes.
template <typename Body>
MXReturnValue for_each_group(const Geometry& g, const Lengths& length, Body body) {
  std::vector<Scratch> scratch(std::max(1, std::min(num_threads(), g.B * g.K)));
  bool done = parallel_groups(g.B * g.K, [&](int group, int w) {
    Scratch& sc = scratch[w];
    body(group_of(g, group, length, &sc), sc);
  });
  return finish(done);
}

inline float dot(const float* a, const float* b, int n) {
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  float out = hsum8(acc);
  for (; i < n; ++i) out += a[i] * b[i];
  return out;
}

inline void axpy(float* y, float alpha, const float* x, int n) {
  const __m256 a = _mm256_set1_ps(alpha);
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += alpha * x[i];
}

// Forward of a group with at most SMALL_ROWS query rows (decoding): dot products and axpys on
// the rows of K and V in place, no packing (which would cost as much as the products).
constexpr int SMALL_ROWS = 4;

void small_forward(const Geometry& g, const int* len, const float* qg, const float* kg,
                   const float* vg, float* cg, float* lg, float scale, Scratch* sc) {
  const long qs = g.stride(g.C), ks = g.stride(g.C), vs = g.stride(g.Cv), cs = g.ctx_stride();
  for (int r = 0; r < g.Lq; ++r) {
    const int n = len[r];
    float* out = cg + r * cs;
    std::memset(out, 0, g.Cv * sizeof(float));
    if (n == 0) {
      lg[r] = -std::numeric_limits<float>::infinity();
      continue;
    }
    float* s = sc->s.get(static_cast<size_t>(n) + 8);
    const float* qr = qg + r * qs;
    for (int j = 0; j < n; ++j) s[j] = scale * dot(qr, kg + j * ks, g.C);
    float m, sum;
    exp_rows(s, n, 1, n, &n, &m, &sum);
    for (int j = 0; j < n; ++j) axpy(out, s[j], vg + j * vs, g.Cv);
    const float inv = 1.0f / sum;
    for (int c = 0; c < g.Cv; ++c) out[c] *= inv;
    lg[r] = m + std::log(sum);
  }
}

// ---------------------------------------------------------------------------------------------
MXReturnValue forward(const std::unordered_map<std::string, std::string>& attrs,
                      std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                      const OpResource& res) {
  int layout = parse_layout(attrs);
  float scale = parse_scale(attrs);
  Geometry g = geometry(*inputs, layout);
  const float* q = inputs->at(0).data<float>();
  const float* k = inputs->at(1).data<float>();
  const float* v = inputs->at(2).data<float>();
  const Lengths length = lengths_of(*inputs, 3, with_length(attrs));
  float* ctx = outputs->at(0).data<float>();
  float* lse = outputs->at(1).data<float>();
  const long qs = g.stride(g.C), ks = g.stride(g.C), vs = g.stride(g.Cv), cs = g.ctx_stride();

  return for_each_group(g, length, [&](const Group& gr, Scratch& sc) {
    const int lm = gr.lm;
    const float *qg = q + gr.q, *kg = k + gr.k, *vg = v + gr.v;
    float* cg = ctx + gr.ctx;
    float* lg = lse + gr.rows;
    if (g.Lq <= SMALL_ROWS) {
      small_forward(g, sc.len.data(), qg, kg, vg, cg, lg, scale, &sc);
      return;
    }
    // K^T (C x lm) and V (lm x C_v) packed once per group.
    float* kt = sc.kt.get(static_cast<size_t>(round_up(lm, NR)) * g.C + NR);
    float* vp = sc.vv.get(static_cast<size_t>(round_up(g.Cv, NR)) * lm + NR);
    pack_b(g.C, lm, kg, 1, ks, kt);
    pack_b(lm, g.Cv, vg, vs, 1, vp);
    const long ld = round_up(std::max(lm, 1), NR);
    float* s = sc.s.get(static_cast<size_t>(BLOCK) * ld);
    float* ap = sc.a.get(static_cast<size_t>(BLOCK) * std::max(lm, g.C) + MR * NR);
    float* stats = sc.rows.get(2 * BLOCK);
    for (int i0 = 0; i0 < g.Lq; i0 += BLOCK) {
      int rows = std::min(BLOCK, g.Lq - i0);
      const int* len = sc.len.data() + i0;
      int n = *std::max_element(len, len + rows);
      float* out = cg + i0 * cs;
      if (n == 0) {
        for (int r = 0; r < rows; ++r) {
          std::memset(out + r * cs, 0, g.Cv * sizeof(float));
          lg[i0 + r] = -std::numeric_limits<float>::infinity();
        }
        continue;
      }
      pack_a(rows, g.C, qg + i0 * qs, qs, 1, ap);
      gemm_packed(rows, n, g.C, ap, kt, s, ld, scale, false);           // scaled scores
      exp_rows(s, ld, rows, n, len, stats, stats + BLOCK);
      pack_a(rows, n, s, ld, 1, ap);
      gemm_packed(rows, g.Cv, n, ap, vp, out, cs, 1.0f, false, lm);          // unnormalised context
      for (int r = 0; r < rows; ++r) {
        float sum = stats[BLOCK + r];
        float* o = out + r * cs;
        if (sum > 0.0f) {
          float inv = 1.0f / sum;
          for (int c = 0; c < g.Cv; ++c) o[c] *= inv;
          lg[i0 + r] = stats[r] + std::log(sum);
        } else {
          std::memset(o, 0, g.Cv * sizeof(float));
          lg[i0 + r] = -std::numeric_limits<float>::infinity();
        }
      }
    }
  });
}

// Backward. inputs: d_context, d_lse, query, key, value, [length,] context, lse.
// outputs: d_query, d_key, d_value[, d_length (zero)].
MXReturnValue backward(const std::unordered_map<std::string, std::string>& attrs,
                       std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                       const OpResource& res) {
  int layout = parse_layout(attrs);
  float scale = parse_scale(attrs);
  const bool has_length = with_length(attrs);
  const size_t after = has_length ? 6 : 5;      // index of the forward outputs
  std::vector<MXTensor> fwd_in(inputs->begin() + 2, inputs->begin() + after);
  Geometry g = geometry(fwd_in, layout);
  const float* dctx = inputs->at(0).data<float>();
  const float* dlse = inputs->at(1).data<float>();
  const float* q = inputs->at(2).data<float>();
  const float* k = inputs->at(3).data<float>();
  const float* v = inputs->at(4).data<float>();
  const Lengths length = lengths_of(*inputs, 5, has_length);
  const float* ctx = inputs->at(after).data<float>();
  const float* lse = inputs->at(after + 1).data<float>();
  float* dq = outputs->at(0).data<float>();
  float* dk = outputs->at(1).data<float>();
  float* dv = outputs->at(2).data<float>();
  if (has_length)
    std::memset(outputs->at(3).data<float>(), 0, outputs->at(3).size() * sizeof(float));
  const long qs = g.stride(g.C), ks = g.stride(g.C), vs = g.stride(g.Cv), cs = g.ctx_stride();

  return for_each_group(g, length, [&](const Group& gr, Scratch& sc) {
    const int lm = gr.lm;
    const float *qg = q + gr.q, *kg = k + gr.k, *vg = v + gr.v;
    const float *dog = dctx + gr.ctx, *og = ctx + gr.ctx;
    const float *lg = lse + gr.rows, *dlg = dlse + gr.rows;
    float *dqg = dq + gr.q, *dkg = dk + gr.k, *dvg = dv + gr.v;
    // accumulators for this group's key and value gradients (lm rows)
    float* dka = sc.dk.get(static_cast<size_t>(std::max(lm, 1)) * g.C);
    float* dva = sc.dv.get(static_cast<size_t>(std::max(lm, 1)) * g.Cv);
    std::memset(dka, 0, static_cast<size_t>(lm) * g.C * sizeof(float));
    std::memset(dva, 0, static_cast<size_t>(lm) * g.Cv * sizeof(float));
    // packed once: K^T (scores), V^T (d weights), K (d query)
    const int cmax = std::max(g.C, g.Cv);
    float* kt = sc.kt.get(static_cast<size_t>(round_up(lm, NR)) * cmax * 2 + 2 * NR);
    float* vt = kt + static_cast<size_t>(round_up(lm, NR)) * cmax + NR;
    float* kp = sc.vv.get(static_cast<size_t>(round_up(g.C, NR)) * lm + NR);
    pack_b(g.C, lm, kg, 1, ks, kt);
    pack_b(g.Cv, lm, vg, 1, vs, vt);
    pack_b(lm, g.C, kg, ks, 1, kp);
    const long ld = round_up(std::max(lm, 1), NR);
    float* s = sc.s.get(static_cast<size_t>(BLOCK) * ld);
    float* dp = sc.dp.get(static_cast<size_t>(BLOCK) * ld);
    float* ap = sc.a.get(static_cast<size_t>(std::max(BLOCK, round_up(lm, MR))) *
                         std::max(std::max(lm, BLOCK), cmax) + MR * NR);
    float* bp = sc.b2.get(static_cast<size_t>(round_up(cmax, NR)) * BLOCK + NR);
    float* dd = sc.rows.get(BLOCK);
    std::vector<unsigned char> empty(BLOCK);
    for (int i0 = 0; i0 < g.Lq; i0 += BLOCK) {
      int rows = std::min(BLOCK, g.Lq - i0);
      const int* len = sc.len.data() + i0;
      int n = *std::max_element(len, len + rows);
      if (n == 0) {
        for (int r = 0; r < rows; ++r) std::memset(dqg + (i0 + r) * qs, 0, g.C * sizeof(float));
        continue;
      }
      for (int r = 0; r < rows; ++r) {
        empty[r] = len[r] == 0;
        const float* o = og + (i0 + r) * cs;
        const float* d = dog + (i0 + r) * cs;
        float acc = 0.0f;
        if (!empty[r])
          for (int c = 0; c < g.Cv; ++c) acc += o[c] * d[c];
        dd[r] = acc - (empty[r] ? 0.0f : dlg[i0 + r]);   // D_i - d lse_i
      }
      // P: the block's weights, recomputed from the saved log-sum-exp
      pack_a(rows, g.C, qg + i0 * qs, qs, 1, ap);
      gemm_packed(rows, n, g.C, ap, kt, s, ld, scale, false);
      for (int r = 0; r < rows; ++r) {
        float* x = s + r * ld;
        int nr = len[r];
        if (nr == 0) { std::memset(x, 0, n * sizeof(float)); continue; }
        const __m256 l = _mm256_set1_ps(lg[i0 + r]);
        int j = 0;
        for (; j + 8 <= nr; j += 8)
          _mm256_storeu_ps(x + j, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), l)));
        for (; j < nr; ++j) x[j] = std::exp(x[j] - lg[i0 + r]);
        for (j = nr; j < n; ++j) x[j] = 0.0f;
      }
      // dP = dO V^T, then dS = P * (dP - D)
      pack_a(rows, g.Cv, dog + i0 * cs, cs, 1, ap, empty.data());
      gemm_packed(rows, n, g.Cv, ap, vt, dp, ld, 1.0f, false);
      for (int r = 0; r < rows; ++r) {
        float* x = dp + r * ld;
        const float* p = s + r * ld;
        int nr = len[r];
        const __m256 d = _mm256_set1_ps(dd[r]);
        int j = 0;
        for (; j + 8 <= nr; j += 8)
          _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_loadu_ps(p + j),
                                                _mm256_sub_ps(_mm256_loadu_ps(x + j), d)));
        for (; j < nr; ++j) x[j] = p[j] * (x[j] - dd[r]);
        for (j = nr; j < n; ++j) x[j] = 0.0f;
      }
      // dV += P^T dO
      pack_a(n, rows, s, 1, ld, ap);
      pack_b(rows, g.Cv, dog + i0 * cs, cs, 1, bp, empty.data());
      gemm_packed(n, g.Cv, rows, ap, bp, dva, g.Cv, 1.0f, true);
      // dK += dS^T Q   (scaled at the end)
      pack_a(n, rows, dp, 1, ld, ap);
      pack_b(rows, g.C, qg + i0 * qs, qs, 1, bp, empty.data());
      gemm_packed(n, g.C, rows, ap, bp, dka, g.C, 1.0f, true);
      // dQ = scale * dS K
      pack_a(rows, n, dp, ld, 1, ap);
      gemm_packed(rows, g.C, n, ap, kp, dqg + i0 * qs, qs, scale, false, lm);
    }
    for (int j = 0; j < g.Lm; ++j) {
      float* dkr = dkg + j * ks;
      float* dvr = dvg + j * vs;
      if (j < lm) {
        for (int c = 0; c < g.C; ++c) dkr[c] = scale * dka[static_cast<long>(j) * g.C + c];
        std::memcpy(dvr, dva + static_cast<long>(j) * g.Cv, g.Cv * sizeof(float));
      } else {
        std::memset(dkr, 0, g.C * sizeof(float));
        std::memset(dvr, 0, g.Cv * sizeof(float));
      }
    }
  });
}

MXReturnValue parse_attrs(const std::unordered_map<std::string, std::string>& attrs,
                          int* num_in, int* num_out) {
  if (parse_layout(attrs) < 0) {
    MX_ERROR_MSG << "ga_fused_attention: layout must be NKT, NTK or TNK";
    return MX_FAIL;
  }
  *num_in = with_length(attrs) ? 4 : 3;
  *num_out = 2;
  return MX_SUCCESS;
}

MXReturnValue infer_type(const std::unordered_map<std::string, std::string>& attrs,
                         std::vector<int>* in, std::vector<int>* out) {
  for (size_t i = 0; i < in->size(); ++i) {
    if ((*in)[i] != -1 && (*in)[i] != kFloat32) {
      MX_ERROR_MSG << "ga_fused_attention: every input must be float32 (input " << i
                   << " has dtype code " << (*in)[i] << ")";
      return MX_FAIL;
    }
  }
  (*out)[0] = kFloat32;
  (*out)[1] = kFloat32;
  return MX_SUCCESS;
}

MXReturnValue infer_shape(const std::unordered_map<std::string, std::string>& attrs,
                          std::vector<std::vector<unsigned int>>* in,
                          std::vector<std::vector<unsigned int>>* out) {
  int layout = parse_layout(attrs);
  unsigned int qb, qk, ql, qc, kb, kk, kl, kc, vb, vk, vl, vc;
  if (!per_head_dims((*in)[0], layout, &qb, &qk, &ql, &qc) ||
      !per_head_dims((*in)[1], layout, &kb, &kk, &kl, &kc) ||
      !per_head_dims((*in)[2], layout, &vb, &vk, &vl, &vc)) {
    MX_ERROR_MSG << "ga_fused_attention: query, key and value must be 4-d";
    return MX_FAIL;
  }
  if (qb != kb || qb != vb || qk != kk || qk != vk || kl != vl || qc != kc) {
    MX_ERROR_MSG << "ga_fused_attention: query, key and value must share B and K, key and "
                    "value L_m, query and key C_k";
    return MX_FAIL;
  }
  if (in->size() == 4) {
    const auto& len = (*in)[3];
    if (!((len.size() == 1 && len[0] == qb) ||
          (len.size() == 2 && len[0] == qb && len[1] == ql))) {
      MX_ERROR_MSG << "ga_fused_attention: length must have shape (B,) or (B, L_q) = (" << qb
                   << ", " << ql << ")";
      return MX_FAIL;
    }
  }
  if (layout == 2)
    (*out)[0] = {ql, qb, qk * vc};
  else
    (*out)[0] = {qb, ql, qk * vc};
  (*out)[1] = {qb, qk, ql};
  return MX_SUCCESS;
}

}  // namespace

REGISTER_OP(ga_fused_attention)
    .setParseAttrs(parse_attrs)
    .setInferType(infer_type)
    .setInferShape(infer_shape)
    .setForward(forward, "cpu")
    .setBackward(backward, "cpu");

MXReturnValue initialize(int version) {
  return version >= 10700 ? MX_SUCCESS : MX_FAIL;
}
