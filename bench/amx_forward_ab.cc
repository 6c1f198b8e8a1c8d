// Before/after timing of the fused kernel's AMX bfloat16 forward pass (kernel_amx.cc) in one
// process: each version of the kernel is built into its own shared library from its own
// source folder, the driver loads them side by side (RTLD_LOCAL: no symbol is shared) and
// alternates them on the same inputs, so that every version sees the same load. The driver
// needs neither MXNet nor the operator; it asks Linux for the tile state itself.
//
//   AMX="-mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx512bf16 -mamx-tile -mamx-bf16 -mfma"
//   # one kernel library per source folder (the earlier commit's from `git archive`):
//   mkdir -p build/ab_old && git archive OLD gluon_attention/core/csrc | tar -x -C build/ab_old
//   g++ -O3 -std=c++17 -fPIC -shared -DAMX_AB_KERNEL $AMX -I build/ab_old/gluon_attention/core/csrc
//       bench/amx_forward_ab.cc -o build/amx_old.so        (one command; likewise amx_new.so
//       from gluon_attention/core/csrc)
//   g++ -O2 -std=c++17 bench/amx_forward_ab.cc -o build/amx_forward_ab -ldl
//   build/amx_forward_ab 12 2048 2048 64 9 build/amx_old.so build/amx_new.so
//
// Arguments: groups (B K), L_q, L_m, C (= C_v), rounds, then the libraries. Each library runs
// all groups (layout NKT, scale 1/sqrt(C), unit-normal inputs; RAGGED=1 in the environment
// gives row i the length 7919 i mod (L_m + 1)) once per round after a first unmeasured round;
// the thread's CPU time, median and best, is printed with the largest differences from the
// first library's context and log-sum-exp and, for group 0, the largest error of the
// log-sum-exp against float64 on the bfloat16-rounded inputs.
#ifdef AMX_AB_KERNEL
#include <stdlib.h>

#include "kernel_amx.cc"

struct ga::Workspace {
  float* p[ga::kWorkspaceSlots];
  long n[ga::kWorkspaceSlots];
};

float* ga::ws_floats(Workspace* ws, int slot, long n) {
  if (ws->n[slot] < n) {
    free(ws->p[slot]);
    ws->p[slot] = static_cast<float*>(aligned_alloc(64, (n * 4 + 63) / 64 * 64));
    ws->n[slot] = ws->p[slot] ? n : 0;
  }
  return ws->p[slot];
}

// All groups of (groups, lq, lm, c) NKT inputs; false when a group failed.
extern "C" bool ga_ab_forward(int groups, int lq, int lm, int c, const float* q, const float* k,
                              const float* v, const int* len, float scale, float* ctx,
                              float* lse) {
  static ga::Workspace ws = {};
  int most = 0;
  for (int i = 0; i < lq; ++i) most = len[i] > most ? len[i] : most;
  for (int g = 0; g < groups; ++g) {
    ga::Task t = {};
    t.heads = 1;
    t.lq = lq, t.lm = lm, t.c = c, t.cv = c;
    t.q = q + static_cast<long>(g) * lq * c;
    t.k = k + static_cast<long>(g) * lm * c;
    t.v = v + static_cast<long>(g) * lm * c;
    t.qs = t.ks = t.vs = t.cs = c;
    t.len = len, t.n = most, t.scale = scale;
    t.ctx = ctx + static_cast<long>(g) * lq * c;
    t.lse = lse + static_cast<long>(g) * lq;
    if (!ga::forward_amx_bf16(t, &ws)) return false;
  }
  return true;
}
#else
#include <dlfcn.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace {

typedef bool (*Forward)(int, int, int, int, const float*, const float*, const float*,
                        const int*, float, float*, float*);

struct Problem {
  int groups, lq, lm, c;
  std::vector<float> q, k, v;
  std::vector<int> len;
};

struct Version {
  const char* path;
  Forward forward;
  std::vector<float> ctx, lse;
  std::vector<double> seconds;
};

double thread_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

float to_bf16(float x) {  // nearest, ties to even (finite x)
  unsigned u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

Problem make_problem(char** argv) {
  Problem p{atoi(argv[1]), atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), {}, {}, {}, {}};
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  p.q.resize(static_cast<long>(p.groups) * p.lq * p.c);
  p.k.resize(static_cast<long>(p.groups) * p.lm * p.c);
  p.v.resize(p.k.size());
  for (std::vector<float>* x : {&p.q, &p.k, &p.v})
    for (float& e : *x) e = normal(rng);
  p.len.assign(p.lq, p.lm);
  if (getenv("RAGGED"))
    for (int i = 0; i < p.lq; ++i) p.len[i] = static_cast<int>(7919L * i % (p.lm + 1));
  return p;
}

// Largest |lse - float64 lse| of group 0 (rows with a key).
double lse_error(const Problem& p, const std::vector<float>& lse, float scale) {
  double worst = 0.0;
  std::vector<double> s(p.lm);
  for (int i = 0; i < p.lq; ++i) {
    if (p.len[i] == 0) continue;
    double top = -INFINITY, sum = 0.0;
    for (int j = 0; j < p.len[i]; ++j) {
      double d = 0.0;
      for (int c = 0; c < p.c; ++c)
        d += static_cast<double>(to_bf16(p.q[i * p.c + c])) * to_bf16(p.k[j * p.c + c]);
      s[j] = d * scale;
      top = std::max(top, s[j]);
    }
    for (int j = 0; j < p.len[i]; ++j) sum += std::exp(s[j] - top);
    worst = std::max(worst, std::fabs(lse[i] - (top + std::log(sum))));
  }
  return worst;
}

double largest_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::isfinite(a[i]) || std::isfinite(b[i]))
      worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
  return worst;
}

bool run_rounds(const Problem& p, int rounds, float scale, std::vector<Version>* versions) {
  for (int r = 0; r <= rounds; ++r)
    for (Version& v : *versions) {
      const double start = thread_seconds();
      if (!v.forward(p.groups, p.lq, p.lm, p.c, p.q.data(), p.k.data(), p.v.data(),
                     p.len.data(), scale, v.ctx.data(), v.lse.data()))
        return false;
      if (r > 0) v.seconds.push_back(thread_seconds() - start);
    }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s GROUPS L_Q L_M C ROUNDS LIBRARY...\n", argv[0]);
    return 2;
  }
  syscall(SYS_arch_prctl, 0x1023, 18);  // ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA
  const Problem p = make_problem(argv);
  const float scale = 1.0f / std::sqrt(static_cast<float>(p.c));
  std::vector<Version> versions;
  for (int i = 6; i < argc; ++i) {
    void* lib = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
    Forward f = lib ? reinterpret_cast<Forward>(dlsym(lib, "ga_ab_forward")) : nullptr;
    if (!f) return std::fprintf(stderr, "%s: %s\n", argv[i], dlerror()), 1;
    versions.push_back({argv[i], f, std::vector<float>(p.q.size()),
                        std::vector<float>(static_cast<long>(p.groups) * p.lq), {}});
  }
  if (!run_rounds(p, atoi(argv[5]), scale, &versions)) return std::fprintf(stderr, "failed\n"), 1;
  for (Version& v : versions) {
    std::sort(v.seconds.begin(), v.seconds.end());
    std::printf("%-24s median %8.2f ms  best %8.2f  | vs first: ctx %.3g lse %.3g | lse err %.3g\n",
                v.path, 1e3 * v.seconds[v.seconds.size() / 2], 1e3 * v.seconds[0],
                largest_difference(v.ctx, versions[0].ctx),
                largest_difference(v.lse, versions[0].lse), lse_error(p, v.lse, scale));
  }
  return 0;
}
#endif
