// Fused multi-head scaled dot-product attention for MXNet 1.9.1 (CPU, float32 or bfloat16
// forward, float32 backward), loaded with
// mx.library.load. This file is the operator: attributes, shapes, the (batch, head) groups and
// the worker threads; it is compiled for any x86-64 CPU. The arithmetic lives in one kernel file
// per instruction set (kernel_avx512.cc, kernel_avx2.cc, the same algorithm from
// kernel_body.inc), each compiled with its own -m flags; which one runs is chosen once, at the
// first use, from the CPU (__builtin_cpu_supports) or the GA_FUSED_ISA environment variable
// (avx512, avx2 or auto). ga_fused_isa() reports the choice.
//
// Operator ga_fused_attention
//   inputs : query, key, value in `layout` (NKT (B,K,L,C) | NTK (B,L,K,C) | TNK (L,B,K,C)),
//            and, when with_length=1 (the default), length (B,) or (B, L_q) float32: query row
//            i of sequence b attends keys j < length[b] (or length[b, i]), clipped to
//            [0, L_m]; 0 gives a zero context row and zero gradients. Without it every key.
//   attrs  : layout, scale (multiplies the scores before the softmax), with_length (0 or 1),
//            matmul_dtype (float32, the default, or bfloat16: the forward pass runs its two
//            products in bfloat16 on AMX tiles (kernel_amx.cc) where ga_fused_amx_problem() is
//            empty, the float32 kernels elsewhere and for at most kSmallRows query rows; the
//            backward pass is always the float32 kernels').
//   outputs: context (B, L_q, K*C_v) for NKT/NTK, (L_q, B, K*C_v) for TNK (head-major merge),
//            lse (B, K, L_q) float32, the log-sum-exp of each row's scaled scores (-inf for an
//            empty row).
//   dtypes : query, key and value float32 or bfloat16 (all three the same), length float32;
//            the context has the query's dtype. bfloat16 ones are read by the AMX tiles as
//            they are (matmul_dtype=bfloat16 where they run, more than kSmallRows query rows;
//            the context rounded to bfloat16 when written); elsewhere widened to float32 for
//            the float32 kernels and the context rounded back. No backward pass for them.
// Keys at or past the longest length of a (batch, head) group are never read; a row's weights
// past its own length are exactly 0, so NaN there cannot reach its weights (as with MXNet's
// length softmax).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif
#include <sys/syscall.h>
#include <unistd.h>

#include "bf16_io.h"
#include "kernel_api.h"
#include "parallel.h"
#include "mxnet/lib_api.h"

using namespace mxnet::ext;

// ---------------------------------------------------------------------------------------------
// Per-thread scratch: kWorkspaceSlots growing, 64-byte aligned buffers.
struct ga::Workspace {
  float* ptr[kWorkspaceSlots] = {};
  long cap[kWorkspaceSlots] = {};
  ~Workspace() {
    for (float* p : ptr) std::free(p);
  }
};

float* ga::ws_floats(Workspace* ws, int slot, long n) {
  if (n > ws->cap[slot] || !ws->ptr[slot]) {
    std::free(ws->ptr[slot]);
    const long cap = std::max(64L, (n + 63) / 64 * 64);
    ws->ptr[slot] = static_cast<float*>(std::aligned_alloc(64, cap * sizeof(float)));
    ws->cap[slot] = ws->ptr[slot] ? cap : 0;
  }
  return ws->ptr[slot];
}

namespace {

// ---------------------------------------------------------------------------------------------
// The instruction set, chosen once: GA_FUSED_ISA=avx512|avx2 forces one (nullptr when this CPU
// lacks it), unset or 'auto' takes the widest this CPU has; nullptr without AVX2 and FMA, or
// for any other value.
const ga::Kernels* choose_kernels() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl");
  const char* env = std::getenv("GA_FUSED_ISA");
  const std::string want = env ? env : "";
  if (want.empty() || want == "auto")
    return avx512 ? &ga::kernels_avx512() : avx2 ? &ga::kernels_avx2() : nullptr;
  if (want == "avx512") return avx512 ? &ga::kernels_avx512() : nullptr;
  if (want == "avx2") return avx2 ? &ga::kernels_avx2() : nullptr;
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// The AMX bfloat16 forward pass: why it cannot run in this process ("" when it can). It needs
// the AVX-512 kernels chosen (not GA_FUSED_ISA=avx2), a CPU with AMX-TILE, AMX-BF16 and
// AVX512-BF16, GA_AMX not 0, and Linux's tile permission for this process (asked for by
// gluon_attention.hardware at import; arch_prctl ARCH_GET_XCOMP_PERM, bit XFEATURE_XTILEDATA,
// reads it without asking). A granted permission stays granted: only that answer is kept.
constexpr long kArchGetXcompPerm = 0x1022;
constexpr int kXfeatureXtiledata = 18;

bool tile_permission() {
  static std::atomic<bool> granted(false);
  if (granted) return true;
  unsigned long features = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &features) != 0) return false;
  if (!((features >> kXfeatureXtiledata) & 1UL)) return false;
  granted = true;
  return true;
}

const char* amx_problem() {
  if (!ga::amx_compiled())
    return "the kernel library was built by a compiler without AMX (gcc 11 or later has it)";
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16") ||
      !__builtin_cpu_supports("avx512bf16"))
    return "this CPU has no AMX-BF16 (amx-tile, amx-bf16 and avx512bf16 are needed)";
  const ga::Kernels* kern = ga::chosen_kernels();
  if (!kern || std::strcmp(kern->name, "avx512") != 0)
    return "the AVX-512 kernels are not in use (GA_FUSED_ISA=avx2)";
  const char* opt = std::getenv("GA_AMX");
  if (opt && std::string(opt) == "0") return "AMX is off: GA_AMX=0";
  if (!tile_permission())
    return "Linux has not granted this process the AMX tile state (arch_prctl "
           "ARCH_REQ_XCOMP_PERM was not asked for or was refused)";
  return "";
}

// The forward pass of the bfloat16 path: AMX tiles, except for groups of at most kSmallRows
// query rows (decoding: bound by memory, the float32 kernel's unpacked path).
bool amx_forward(const ga::Task& t, ga::Workspace* ws) {
  if (t.lq <= ga::kSmallRows) return ga::chosen_kernels()->forward(t, ws);
  return ga::forward_amx_bf16(t, ws);
}

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

// matmul_dtype: 0 float32 (absent too), 1 bfloat16, -1 anything else.
int parse_matmul_dtype(const std::unordered_map<std::string, std::string>& attrs) {
  auto it = attrs.find("matmul_dtype");
  if (it == attrs.end() || it->second == "float32") return 0;
  return it->second == "bfloat16" ? 1 : -1;
}

// Row-wise softmax pieces on a block of scores s (rows x ld), valid columns [0, len[r]):
// s <- exp(s - max) on the valid columns, 0 past them; returns sum and max per row.
// (batch, head) groups on the worker threads: each worker has its workspace; a group's lengths
// and the offsets of its rows go into a Task for the chosen kernels.
typedef bool (*GroupKernel)(const ga::Task&, ga::Workspace*);

// How the work is cut into tasks: `span` consecutive groups of `rows` query rows each.
struct Plan {
  int span = 1, key_run = 1, rows = 0, pieces = 1, tasks = 0;
};

Plan plan_tasks(const Geometry& g, bool forward) {
  Plan p;
  const int groups = g.B * g.K, threads = ga::num_threads();
  p.rows = g.Lq;
  if (forward && g.Lq <= ga::kSmallRows && groups > 0) {
    // Decoding, bound by memory (measured on the decode benchmark): the heads of a sequence
    // in one task, their key rows read head by head, key by key (in NTK they lie side by
    // side); in TNK a run of (batch, head) groups across sequences, 8 keys of one group before
    // the next: memory is then read as 8 streams along the (B, K, C) slabs of 8 keys.
    p.span = g.layout == 2 ? std::max(1, groups / (2 * threads)) : g.K;
    p.key_run = g.layout == 2 ? 8 : 1;
  } else if (forward && groups > 0 && groups < 4 * threads) {
    // Few groups: the forward pass also splits the query rows (each task packs its keys).
    const int want = (4 * threads + groups - 1) / groups;
    p.rows = std::max(128, (g.Lq + want - 1) / want + 127) / 128 * 128;
    p.pieces = (g.Lq + p.rows - 1) / p.rows;
  }
  p.tasks = (groups + p.span - 1) / p.span * p.pieces;
  return p;
}

// Task i of the plan; len: room for span * rows lengths.
ga::Task task_at(const ga::Task& proto, const Geometry& g, const Lengths& length,
                 const Plan& p, int i, int* len) {
  const int groups = g.B * g.K;
  const int group = i / p.pieces * p.span, b = group / g.K, h = group % g.K;
  const int i0 = i % p.pieces * p.rows;
  ga::Task t = proto;
  t.heads = std::min(p.span, groups - group);
  t.key_run = p.key_run;
  t.lq = std::min(p.rows, g.Lq - i0);
  std::vector<int> all(g.Lq);
  for (int e = 0; e < t.heads; ++e) {
    row_lengths(length, g, (group + e) / g.K, all.data());
    std::copy(all.begin() + i0, all.begin() + i0 + t.lq, len + static_cast<long>(e) * t.lq);
  }
  t.len = len;
  t.n = t.lq ? *std::max_element(len, len + static_cast<long>(t.heads) * t.lq) : 0;
  const long q = g.base(b, h, g.Lq, g.C) + i0 * t.qs, k = g.base(b, h, g.Lm, g.C);
  const long v = g.base(b, h, g.Lm, g.Cv), c = g.ctx_base(b, h) + i0 * t.cs;
  const long rows = static_cast<long>(group) * g.Lq + i0;     // of lse (B, K, L_q)
  t.lse += rows;
  if (t.qb) {
    t.qb += q; t.kb += k; t.vb += v; t.ctxb += c;
  } else {
    t.q += q; t.k += k; t.v += v;
  }
  if (t.ctx) t.ctx += c;
  if (t.dctx) {
    t.dctx += c; t.out += c; t.dlse += rows;
    t.dq += q; t.dk += k; t.dv += v;
  }
  return t;
}

// Runs the pass of `kern` (the chosen kernels, or their copy with the bfloat16 forward pass)
// over every task on the worker threads, each with its workspace.
MXReturnValue for_each_group(const Geometry& g, const Lengths& length, const ga::Task& proto,
                             const ga::Kernels* kern, GroupKernel ga::Kernels::*pass) {
  if (!kern) {
    MX_ERROR_MSG << "ga_fused_attention: no kernel for this CPU (it needs AVX2 and FMA, or "
                    "GA_FUSED_ISA names an instruction set it lacks)";
    return MX_FAIL;
  }
  const Plan plan = plan_tasks(g, pass == &ga::Kernels::forward);
  const int workers = std::max(1, std::min(ga::num_threads(), plan.tasks));
  std::vector<ga::Workspace> spaces(workers);
  std::vector<std::vector<int>> lens(workers,
                                     std::vector<int>(static_cast<long>(plan.span) * plan.rows));
  std::atomic<int> next(0);
  std::atomic<bool> ok(true);
  auto work = [&](int w) {
    for (int i = next++; i < plan.tasks && ok; i = next++) {
      const ga::Task t = task_at(proto, g, length, plan, i, lens[w].data());
      if (!(kern->*pass)(t, &spaces[w])) ok = false;
    }
  };
  ga::parallel(workers, work);
  if (ok) return MX_SUCCESS;
  MX_ERROR_MSG << "ga_fused_attention: out of memory for the per-thread block buffers";
  return MX_FAIL;
}

ga::Task task_of(const Geometry& g, float scale) {
  ga::Task t = {};
  t.lq = g.Lq; t.lm = g.Lm; t.c = g.C; t.cv = g.Cv;
  t.qs = g.stride(g.C); t.ks = g.stride(g.C); t.vs = g.stride(g.Cv); t.cs = g.ctx_stride();
  t.qh = g.base(0, 1, g.Lq, g.C); t.kh = g.base(0, 1, g.Lm, g.C);
  t.vh = g.base(0, 1, g.Lm, g.Cv); t.ch = g.ctx_base(0, 1);
  t.scale = scale;
  return t;
}

// ---------------------------------------------------------------------------------------------
// The forward pass of bfloat16 query, key and value into a bfloat16 context (t: lse set):
// `tiles` (the chosen kernels with the AMX forward pass, or nullptr where the tiles do not run)
// reads them as they are for more than kSmallRows query rows; otherwise they are widened to
// float32, run through `kern` and the context rounded back.
MXReturnValue forward_bf16(const Geometry& g, const Lengths& len, ga::Task t,
                           const ga::Kernels* kern, const ga::Kernels* tiles,
                           std::vector<MXTensor>* inputs, MXTensor& ctx) {
  if (tiles && g.Lq > ga::kSmallRows) {
    ga::Kernels direct = *tiles;
    direct.forward = ga::forward_amx_bf16;
    t.qb = ga::bf16_data(inputs->at(0));
    t.kb = ga::bf16_data(inputs->at(1));
    t.vb = ga::bf16_data(inputs->at(2));
    t.ctxb = ga::bf16_out(ctx);
    return for_each_group(g, len, t, &direct, &ga::Kernels::forward);
  }
  const ga::Bf16Convert& cvt = ga::bf16_convert();
  if (!cvt.widen) return for_each_group(g, len, t, nullptr, &ga::Kernels::forward);
  std::vector<float> wide[4];
  for (int i = 0; i < 3; ++i) {
    wide[i].resize(inputs->at(i).size());
    cvt.widen(ga::bf16_data(inputs->at(i)), wide[i].data(), inputs->at(i).size());
  }
  wide[3].resize(ctx.size());
  t.q = wide[0].data(); t.k = wide[1].data(); t.v = wide[2].data(); t.ctx = wide[3].data();
  const MXReturnValue done = for_each_group(g, len, t, tiles ? tiles : kern,
                                            &ga::Kernels::forward);
  cvt.narrow(wide[3].data(), ga::bf16_out(ctx), ctx.size());
  return done;
}

MXReturnValue forward(const std::unordered_map<std::string, std::string>& attrs,
                      std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                      const OpResource& res) {
  const Geometry g = geometry(*inputs, parse_layout(attrs));
  const Lengths len = lengths_of(*inputs, 3, with_length(attrs));
  ga::Task t = task_of(g, parse_scale(attrs));
  t.lse = outputs->at(1).data<float>();
  const ga::Kernels* kern = ga::chosen_kernels();
  ga::Kernels bf16;
  const bool amx = kern && parse_matmul_dtype(attrs) == 1 && !*amx_problem();
  if (amx) {
    bf16 = *kern;
    bf16.forward = amx_forward;
  }
  if (ga::is_bf16(inputs->at(0)))
    return forward_bf16(g, len, t, kern, amx ? &bf16 : nullptr, inputs, outputs->at(0));
  t.q = inputs->at(0).data<float>();
  t.k = inputs->at(1).data<float>();
  t.v = inputs->at(2).data<float>();
  t.ctx = outputs->at(0).data<float>();
  return for_each_group(g, len, t, amx ? &bf16 : kern, &ga::Kernels::forward);
}

// Backward. inputs: d_context, d_lse, query, key, value, [length,] context, lse.
// outputs: d_query, d_key, d_value[, d_length (zero)].
MXReturnValue backward(const std::unordered_map<std::string, std::string>& attrs,
                       std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                       const OpResource& res) {
  if (ga::is_bf16(inputs->at(2))) {
    MX_ERROR_MSG << "ga_fused_attention: no backward pass for bfloat16 query, key and value "
                    "(the bfloat16 path is for inference); train with float32 inputs";
    return MX_FAIL;
  }
  const bool has_length = with_length(attrs);
  const size_t after = has_length ? 6 : 5;      // index of the forward outputs
  std::vector<MXTensor> fwd_in(inputs->begin() + 2, inputs->begin() + after);
  const Geometry g = geometry(fwd_in, parse_layout(attrs));
  ga::Task t = task_of(g, parse_scale(attrs));
  t.dctx = inputs->at(0).data<float>();
  t.dlse = inputs->at(1).data<float>();
  t.q = inputs->at(2).data<float>();
  t.k = inputs->at(3).data<float>();
  t.v = inputs->at(4).data<float>();
  t.out = inputs->at(after).data<float>();
  t.lse = inputs->at(after + 1).data<float>();
  t.dq = outputs->at(0).data<float>();
  t.dk = outputs->at(1).data<float>();
  t.dv = outputs->at(2).data<float>();
  if (has_length)
    std::memset(outputs->at(3).data<float>(), 0, outputs->at(3).size() * sizeof(float));
  return for_each_group(g, lengths_of(*inputs, 5, has_length), t, ga::chosen_kernels(),
                        &ga::Kernels::backward);
}

MXReturnValue parse_attrs(const std::unordered_map<std::string, std::string>& attrs,
                          int* num_in, int* num_out) {
  if (parse_layout(attrs) < 0) {
    MX_ERROR_MSG << "ga_fused_attention: layout must be NKT, NTK or TNK";
    return MX_FAIL;
  }
  if (parse_matmul_dtype(attrs) < 0) {
    MX_ERROR_MSG << "ga_fused_attention: matmul_dtype must be float32 or bfloat16";
    return MX_FAIL;
  }
  *num_in = with_length(attrs) ? 4 : 3;
  *num_out = 2;
  return MX_SUCCESS;
}

// query, key and value float32 or bfloat16, the same; length float32; the context has the
// query's dtype (float32 while none is known), lse float32.
MXReturnValue infer_type(const std::unordered_map<std::string, std::string>& attrs,
                         std::vector<int>* in, std::vector<int>* out) {
  static const char* const names[] = {"query", "key", "value", "length"};
  int rows = -1;
  for (size_t i = 0; i < in->size(); ++i) {
    const int t = (*in)[i];
    if (t == -1 || (i == 3 && t == kFloat32)) continue;
    if (i == 3 || (t != kFloat32 && t != ga::kBfloat16Code) || (rows != -1 && t != rows)) {
      MX_ERROR_MSG << "ga_fused_attention: " << names[i] << " must be "
                   << (i == 3 ? "float32" : rows != -1 ? "of the others' dtype (query, key and "
                                                         "value all float32 or all bfloat16)"
                                                       : "float32 or bfloat16")
                   << " (dtype codes: float32 0, bfloat16 12; received " << t << ")";
      return MX_FAIL;
    }
    rows = t;
  }
  (*out)[0] = rows == -1 ? static_cast<int>(kFloat32) : rows;
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

const ga::Kernels* ga::chosen_kernels() {
  static const ga::Kernels* chosen = choose_kernels();
  return chosen;
}

void ga::parallel(int workers, const std::function<void(int)>& work) {
  const char* pool = std::getenv("GA_THREAD_POOL");
#ifdef _OPENMP
  const bool started = pool && std::strcmp(pool, "std") == 0;
#else
  const bool started = true;  // built without OpenMP: threads started for the call
#endif
  if (workers > 1 && started) {
    std::vector<std::thread> threads;
    for (int w = 1; w < workers; ++w) threads.emplace_back(work, w);
    work(0);
    for (auto& th : threads) th.join();
    return;
  }
#ifdef _OPENMP
#pragma omp parallel num_threads(workers)
  work(omp_get_thread_num());
#else
  work(0);
#endif
}

int ga::num_threads() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  int n = env ? std::atoi(env) : 0;
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, n);
}

REGISTER_OP(ga_fused_attention)
    .setParseAttrs(parse_attrs)
    .setInferType(infer_type)
    .setInferShape(infer_shape)
    .setForward(forward, "cpu")
    .setBackward(backward, "cpu");

MXReturnValue initialize(int version) {
  return version >= 10700 ? MX_SUCCESS : MX_FAIL;
}

// For gluon_attention.core.fused.isa() (through ctypes): the kernels in use ("avx512", "avx2",
// or "" when none can run here) and the instruction sets this CPU has, space-separated.
extern "C" const char* ga_fused_isa() {
  const ga::Kernels* k = ga::chosen_kernels();
  return k ? k->name : "";
}

// Why the bfloat16 forward pass (matmul_dtype=bfloat16) cannot run on AMX tiles in this
// process ("" when it can; asked at every call: the permission may be granted later).
extern "C" const char* ga_fused_amx_problem() { return amx_problem(); }

extern "C" const char* ga_fused_cpu_features() {
  static const std::string found = [] {
    __builtin_cpu_init();
    std::string out;
#define GA_FEATURE(NAME) if (__builtin_cpu_supports(NAME)) out += out.empty() ? NAME : " " NAME;
    GA_FEATURE("avx2") GA_FEATURE("fma") GA_FEATURE("avx512f") GA_FEATURE("avx512bw")
    GA_FEATURE("avx512dq") GA_FEATURE("avx512vl") GA_FEATURE("avx512bf16")
    GA_FEATURE("amx-tile") GA_FEATURE("amx-bf16")
#undef GA_FEATURE
    return out;
  }();
  return found.c_str();
}
