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
};

// One instruction set's kernels. forward/backward process one group and return false only
// when scratch memory could not be had.
struct Kernels {
  const char* name;
  bool (*forward)(const Task& task, Workspace* ws);
  bool (*backward)(const Task& task, Workspace* ws);
};

const Kernels& kernels_avx2();
const Kernels& kernels_avx512();

}  // namespace ga

#endif  // GA_KERNEL_API_H_
