// The interface between the operator (fused_attention.cc, compiled for any x86-64 CPU) and the
// per-instruction-set kernels (kernel_avx2.cc, kernel_avx512.cc, each compiled with its own
// -m flags). Declarations and plain structs only: no inline function and no template is defined
// here, so no code compiled for AVX-512 can be shared with (and chosen by the linker for) the
// AVX2 path.
#ifndef GA_KERNEL_API_H_
#define GA_KERNEL_API_H_

namespace ga {

// Per-thread scratch memory, owned by the operator. ws_floats returns `slot`'s buffer with room
// for at least n floats, 64-byte aligned (its contents are not kept across a larger request),
// or nullptr when the allocation fails.
struct Workspace;
float* ws_floats(Workspace* ws, int slot, long n);
constexpr int kWorkspaceSlots = 12;
// Groups of at most this many query rows (decoding) take the unpacked path; its forward pass
// can take several groups at once (Task::heads), reading rows that lie side by side in memory
// (layouts NTK and TNK) in one sweep.
constexpr int kSmallRows = 4;

// One (batch, head) group, or `heads` consecutive ones (group e's rows at ptr + e * head
// stride). Rows of the per-head tensors are read at ptr + row * stride.
struct Task {
  int heads;                // 1, or more for the unpacked forward pass
  int key_run;              // unpacked forward: keys taken for one row before the next row
  long qh, kh, vh, ch;      // head strides of q, k, v, ctx (lse: lq)
  int lq, lm, c, cv;        // query rows, key rows, C_k, C_v
  const float* q;           // (lq, c) rows, stride qs
  const float* k;           // (lm, c) rows, stride ks
  const float* v;           // (lm, cv) rows, stride vs
  long qs, ks, vs, cs;      // row strides; cs: of the context (and its gradient) rows
  const int* len;           // clipped key count of each query row (heads x lq, in [0, lm])
  int n;                    // the largest of them: keys at or past it are never read
  float scale;              // multiplies the scores before the softmax
  float* ctx;               // forward output: (lq, cv) context rows, stride cs
  float* lse;               // forward output (backward input): lq log-sum-exp values
  const float* dctx;        // backward inputs: d context rows (stride cs), d lse, context
  const float* dlse;
  const float* out;
  float* dq;                // backward outputs, rows as q, k, v
  float* dk;
  float* dv;
  // bfloat16 inputs and context (raw 16 bits; the AMX forward pass only, forward_amx_bf16):
  // when qb is set, q, k, v and ctx are unused and these rows (same strides) are read and
  // written instead.
  const unsigned short* qb;
  const unsigned short* kb;
  const unsigned short* vb;
  unsigned short* ctxb;
};

// Row-wise operators (fused_rowwise.cc) on an (N, D) problem, rows [r0, r1) per call:
//   add_layer_norm:  y = LayerNorm(x + res) with scale gamma and shift beta over each row
//                    (res may be nullptr: LayerNorm(x)); backward writes dx (and dres when
//                    not nullptr, the same values) and adds the row sums of dy * xhat and dy
//                    into dgamma and dbeta.
//   bias_gelu:       y = gelu(x + gamma) with the erf form of GELU; backward writes dx and adds
//                    its row sums into dgamma (the bias gradient).
struct RowTask {
  long d;                   // D, the row length
  const float* x;           // (N, D) rows
  const float* res;         // (N, D) residual rows, or nullptr
  const float* gamma;       // (D,)
  const float* beta;        // (D,)
  float eps;                // added to the variance
  float* y;                 // forward output (N, D)
  const float* dy;          // backward input (N, D)
  float* dx;                // backward outputs (N, D)
  float* dres;
  double* dgamma;           // (D,) partial sums of this call's rows, added to (in double:
  double* dbeta;            // the sums over many rows stay exact to float32)
};
typedef void (*RowKernel)(const RowTask& task, long r0, long r1);

// bfloat16 (its raw 16 bits: the high half of a float32) and float32, n values: widen is
// exact; narrow rounds to the nearest bfloat16, ties to even (NaN stays NaN, made quiet).
typedef void (*WidenBf16)(const unsigned short* src, float* dst, long n);
typedef void (*NarrowBf16)(const float* src, unsigned short* dst, long n);

// One instruction set's kernels. forward/backward process one group and return false only
// when scratch memory could not be had.
struct Kernels {
  const char* name;
  bool (*forward)(const Task& task, Workspace* ws);
  bool (*backward)(const Task& task, Workspace* ws);
  RowKernel add_layer_norm, add_layer_norm_backward, bias_gelu, bias_gelu_backward;
  WidenBf16 widen_bf16;
  NarrowBf16 narrow_bf16;
};

const Kernels& kernels_avx2();
const Kernels& kernels_avx512();
// The forward pass of one group (heads == 1, lq > kSmallRows) with bfloat16 products on AMX
// tiles (kernel_amx.cc): only where amx_problem() is empty, never on another CPU.
bool forward_amx_bf16(const Task& task, Workspace* ws);
// Whether kernel_amx.cc was compiled with the AMX instruction sets (false: a compiler without
// them built its stubs, and forward_amx_bf16 must not be chosen).
bool amx_compiled();

// narrow with the AVX512-BF16 instruction (kernel_bf16.cc: subnormal float32 values become
// 0, as the instruction takes them); only where the CPU has AVX512-BF16 and
// bf16_native_compiled() is true (a compiler without it builds a stub).
void narrow_bf16_native(const float* src, unsigned short* dst, long n);
bool bf16_native_compiled();
// The conversions for this process (bf16_io.cc): the chosen kernels', with narrow_bf16_native
// where the AVX-512 kernels run on a CPU with AVX512-BF16; nullptr members without kernels.
struct Bf16Convert {
  const char* name;         // "avx512bf16", "avx512", "avx2" or ""
  WidenBf16 widen;
  NarrowBf16 narrow;
};
const Bf16Convert& bf16_convert();

// The kernels chosen for this process (nullptr when none can run here) and the number of
// worker threads (OMP_NUM_THREADS, else the hardware's); defined in fused_attention.cc.
const Kernels* chosen_kernels();
int num_threads();

}  // namespace ga

#endif  // GA_KERNEL_API_H_
