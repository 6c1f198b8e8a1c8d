// Row-wise fused operators for MXNet 1.9.1 (CPU, float32 or bfloat16), in the same library as the fused
// attention: one pass over the rows instead of a chain of operators, forward and backward. The
// arithmetic is in rowwise_body.inc, compiled per instruction set with the attention kernels
// (the same choice, ga::chosen_kernels); this file (any x86-64 CPU) checks shapes and splits the
// rows over the worker threads.
//
// Operator ga_add_layer_norm (D = the last axis)
//   inputs : data (..., D), gamma (D,), beta (D,), and, when residual=1 (the default), residual
//            with data's shape.
//   attrs  : eps (added to the variance), residual (0 or 1).
//   output : LayerNorm(data + residual) over the last axis, scaled by gamma, shifted by beta
//            (biased variance, as MXNet's LayerNorm; Ba et al., 2016).
//   backward recomputes the row statistics from data (+ residual); the residual's gradient is
//   the data's.
// Operator ga_bias_gelu
//   inputs : data (..., D), bias (D,).
//   output : gelu(data + bias), erf form: z Phi(z) with Phi the standard normal CDF.
// dtypes: data (and residual) float32 or bfloat16, the same; gamma, beta and bias float32; the
// output has data's dtype. bfloat16 rows are widened to float32, computed as float32 rows are
// and rounded to the nearest bfloat16 (ties to even); forward only (the backward pass refuses
// bfloat16).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "bf16_io.h"
#include "kernel_api.h"
#include "parallel.h"
#include "mxnet/lib_api.h"

using namespace mxnet::ext;

namespace {

typedef std::unordered_map<std::string, std::string> Attrs;

bool has_residual(const Attrs& attrs) {
  auto it = attrs.find("residual");
  return it == attrs.end() || it->second != "0";
}

float parse_eps(const Attrs& attrs) {
  auto it = attrs.find("eps");
  return it == attrs.end() ? 1e-5f : std::stof(it->second);
}

// Rows [0, rows) over the worker threads in chunks of kChunk rows, taken in turn from a shared
// counter (a worker that the system holds back leaves its share to the others): body(c, r0, r1)
// for chunk c, rows [r0, r1).
constexpr long kChunk = 64;

template <typename Body>
void over_chunks(long rows, Body body) {
  const long chunks = (rows + kChunk - 1) / kChunk;
  const long workers = std::max(1L, std::min<long>(ga::num_threads(), chunks));
  std::atomic<long> next(0);
  auto work = [&]() {
    for (long c = next++; c < chunks; c = next++)
      body(c, c * kChunk, std::min(rows, (c + 1) * kChunk));
  };
  ga::parallel(static_cast<int>(workers), [&](int) { work(); });
}

// The float32 rows of t. Chunk c gets partial sums `part + c * 2 * d` (zeroed) for the
// parameter gradients, added into dgamma (and dbeta) in chunk order afterwards, so the result
// does not depend on the timing.
void run_rows(ga::RowKernel kernel, ga::RowTask t, long rows, float* dgamma, float* dbeta) {
  const long chunks = (rows + kChunk - 1) / kChunk;
  const bool sums = dgamma != nullptr;
  std::vector<double> part(sums ? chunks * 2 * t.d : 0, 0.0);
  over_chunks(rows, [&](long c, long r0, long r1) {
    ga::RowTask mine = t;
    if (sums) {
      mine.dgamma = part.data() + c * 2 * t.d;
      mine.dbeta = mine.dgamma + t.d;
    }
    kernel(mine, r0, r1);
  });
  if (!sums) return;
  for (long j = 0; j < t.d; ++j) {
    double g = 0.0, b = 0.0;
    for (long c = 0; c < chunks; ++c) {
      g += part[c * 2 * t.d + j];
      b += part[c * 2 * t.d + t.d + j];
    }
    dgamma[j] = static_cast<float>(g);
    if (dbeta) dbeta[j] = static_cast<float>(b);
  }
}

// The bfloat16 rows x (and res: nullptr without) into y, forward: each row widened to float32
// (a per-chunk scratch of 3 rows), run through `kernel` as a one-row task of t (its gamma,
// beta, eps) and its output rounded to bfloat16.
struct Bf16Rows {
  const unsigned short* x;
  const unsigned short* res;
  unsigned short* y;
};

void run_rows_bf16(ga::RowKernel kernel, const ga::RowTask& t, long rows, Bf16Rows io) {
  const ga::Bf16Convert& cvt = ga::bf16_convert();
  over_chunks(rows, [&](long, long r0, long r1) {
    std::vector<float> buf(3 * t.d);
    ga::RowTask one = t;
    one.x = buf.data();
    one.res = io.res ? buf.data() + t.d : nullptr;
    one.y = buf.data() + 2 * t.d;
    for (long r = r0; r < r1; ++r) {
      cvt.widen(io.x + r * t.d, buf.data(), t.d);
      if (io.res) cvt.widen(io.res + r * t.d, buf.data() + t.d, t.d);
      kernel(one, 0, 1);
      cvt.narrow(one.y, io.y + r * t.d, t.d);
    }
  });
}

// The backward passes take float32 only (data is input 1 of a backward call).
bool float32_backward(const char* op, const MXTensor& data) {
  if (!ga::is_bf16(data)) return true;
  MX_ERROR_MSG << op << ": no backward pass for bfloat16 data (the bfloat16 path is for "
                        "inference); train with float32 data";
  return false;
}

const ga::Kernels* kernels_or_error(const char* op) {
  const ga::Kernels* kern = ga::chosen_kernels();
  if (!kern)
    MX_ERROR_MSG << op << ": no kernel for this CPU (it needs AVX2 and FMA, or GA_FUSED_ISA "
                          "names an instruction set it lacks)";
  return kern;
}

// (rows N, row length D) of an (..., D) tensor.
void rows_of(const MXTensor& x, long* n, long* d) {
  *d = x.shape.empty() ? 1 : x.shape.back();
  *n = *d ? x.size() / *d : 0;
}

ga::RowTask row_task(MXTensor& data, MXTensor& gamma, long d) {
  ga::RowTask t = {};
  t.d = d;
  t.x = data.data<float>();
  t.gamma = gamma.data<float>();
  return t;
}

// ---------------------------------------------------------------------------------------------
MXReturnValue ln_forward(const Attrs& attrs, std::vector<MXTensor>* in,
                         std::vector<MXTensor>* out, const OpResource& res) {
  const ga::Kernels* kern = kernels_or_error("ga_add_layer_norm");
  if (!kern) return MX_FAIL;
  long n, d;
  rows_of(in->at(0), &n, &d);
  ga::RowTask t = row_task(in->at(0), in->at(1), d);
  t.beta = in->at(2).data<float>();
  t.eps = parse_eps(attrs);
  if (ga::is_bf16(in->at(0))) {
    const Bf16Rows io{ga::bf16_data(in->at(0)),
                      has_residual(attrs) ? ga::bf16_data(in->at(3)) : nullptr,
                      ga::bf16_out(out->at(0))};
    run_rows_bf16(kern->add_layer_norm, t, n, io);
    return MX_SUCCESS;
  }
  t.res = has_residual(attrs) ? in->at(3).data<float>() : nullptr;
  t.y = out->at(0).data<float>();
  run_rows(kern->add_layer_norm, t, n, nullptr, nullptr);
  return MX_SUCCESS;
}

// inputs: d_out, data, gamma, beta, [residual,] out; outputs: d_data, d_gamma, d_beta,
// [d_residual].
MXReturnValue ln_backward(const Attrs& attrs, std::vector<MXTensor>* in,
                          std::vector<MXTensor>* out, const OpResource& res) {
  const ga::Kernels* kern = kernels_or_error("ga_add_layer_norm");
  if (!kern || !float32_backward("ga_add_layer_norm", in->at(1))) return MX_FAIL;
  const bool with_res = has_residual(attrs);
  long n, d;
  rows_of(in->at(1), &n, &d);
  ga::RowTask t = row_task(in->at(1), in->at(2), d);
  t.beta = in->at(3).data<float>();
  t.res = with_res ? in->at(4).data<float>() : nullptr;
  t.eps = parse_eps(attrs);
  t.dy = in->at(0).data<float>();
  t.dx = out->at(0).data<float>();
  t.dres = with_res ? out->at(3).data<float>() : nullptr;
  run_rows(kern->add_layer_norm_backward, t, n, out->at(1).data<float>(),
           out->at(2).data<float>());
  return MX_SUCCESS;
}

MXReturnValue gelu_forward(const Attrs& attrs, std::vector<MXTensor>* in,
                           std::vector<MXTensor>* out, const OpResource& res) {
  const ga::Kernels* kern = kernels_or_error("ga_bias_gelu");
  if (!kern) return MX_FAIL;
  long n, d;
  rows_of(in->at(0), &n, &d);
  ga::RowTask t = row_task(in->at(0), in->at(1), d);
  if (ga::is_bf16(in->at(0))) {
    run_rows_bf16(kern->bias_gelu, t, n,
                  Bf16Rows{ga::bf16_data(in->at(0)), nullptr, ga::bf16_out(out->at(0))});
    return MX_SUCCESS;
  }
  t.y = out->at(0).data<float>();
  run_rows(kern->bias_gelu, t, n, nullptr, nullptr);
  return MX_SUCCESS;
}

// inputs: d_out, data, bias, out; outputs: d_data, d_bias.
MXReturnValue gelu_backward(const Attrs& attrs, std::vector<MXTensor>* in,
                            std::vector<MXTensor>* out, const OpResource& res) {
  const ga::Kernels* kern = kernels_or_error("ga_bias_gelu");
  if (!kern || !float32_backward("ga_bias_gelu", in->at(1))) return MX_FAIL;
  long n, d;
  rows_of(in->at(1), &n, &d);
  ga::RowTask t = row_task(in->at(1), in->at(2), d);
  t.dy = in->at(0).data<float>();
  t.dx = out->at(0).data<float>();
  run_rows(kern->bias_gelu_backward, t, n, out->at(1).data<float>(), nullptr);
  return MX_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
MXReturnValue ln_parse(const Attrs& attrs, int* num_in, int* num_out) {
  *num_in = has_residual(attrs) ? 4 : 3;
  *num_out = 1;
  return MX_SUCCESS;
}

MXReturnValue gelu_parse(const Attrs& attrs, int* num_in, int* num_out) {
  *num_in = 2;
  *num_out = 1;
  return MX_SUCCESS;
}

// data (and residual) float32 or bfloat16, the same; inputs 1.. `vectors` (gamma and beta, or
// bias) float32; the output has data's dtype (float32 while no input's is known).
MXReturnValue rows_type(std::vector<int>* in, std::vector<int>* out, size_t vectors,
                        const char* op, const char* const* names) {
  int rows = -1;
  for (size_t i = 0; i < in->size(); ++i) {
    const int t = (*in)[i];
    const bool vector = i >= 1 && i <= vectors;
    if (t == -1 || (vector && t == kFloat32)) continue;
    if (vector || (t != kFloat32 && t != ga::kBfloat16Code) || (rows != -1 && t != rows)) {
      MX_ERROR_MSG << op << ": " << names[i] << " must be "
                   << (vector ? "float32" : rows != -1 ? "of data's dtype (both float32 or both "
                                                         "bfloat16)"
                                                       : "float32 or bfloat16")
                   << " (dtype codes: float32 0, bfloat16 12; received " << t << ")";
      return MX_FAIL;
    }
    rows = t;
  }
  (*out)[0] = rows == -1 ? static_cast<int>(kFloat32) : rows;
  return MX_SUCCESS;
}

MXReturnValue ln_type(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  static const char* const names[] = {"data", "gamma", "beta", "residual"};
  return rows_type(in, out, 2, "ga_add_layer_norm", names);
}

MXReturnValue gelu_type(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  static const char* const names[] = {"data", "bias"};
  return rows_type(in, out, 1, "ga_bias_gelu", names);
}

// data (..., D) with D >= 1; inputs 1.. `vectors` are (D,), the rest data's shape.
MXReturnValue rows_shape(std::vector<std::vector<unsigned int>>* in,
                         std::vector<std::vector<unsigned int>>* out, size_t vectors) {
  const auto& data = (*in)[0];
  if (data.empty() || data.back() == 0) {
    MX_ERROR_MSG << "ga_add_layer_norm / ga_bias_gelu: data must have a last axis D >= 1";
    return MX_FAIL;
  }
  for (size_t i = 1; i < in->size(); ++i) {
    const bool ok = i <= vectors ? (*in)[i] == std::vector<unsigned int>{data.back()}
                                 : (*in)[i] == data;
    if (!ok) {
      MX_ERROR_MSG << "ga_add_layer_norm / ga_bias_gelu: input " << i << " must have shape "
                   << (i <= vectors ? "(D,)" : "of data") << ", D = " << data.back();
      return MX_FAIL;
    }
  }
  (*out)[0] = data;
  return MX_SUCCESS;
}

MXReturnValue ln_shape(const Attrs& attrs, std::vector<std::vector<unsigned int>>* in,
                       std::vector<std::vector<unsigned int>>* out) {
  return rows_shape(in, out, 2);
}

MXReturnValue gelu_shape(const Attrs& attrs, std::vector<std::vector<unsigned int>>* in,
                         std::vector<std::vector<unsigned int>>* out) {
  return rows_shape(in, out, 1);
}

}  // namespace

REGISTER_OP(ga_add_layer_norm)
    .setParseAttrs(ln_parse)
    .setInferType(ln_type)
    .setInferShape(ln_shape)
    .setForward(ln_forward, "cpu")
    .setBackward(ln_backward, "cpu");

REGISTER_OP(ga_bias_gelu)
    .setParseAttrs(gelu_parse)
    .setInferType(gelu_type)
    .setInferShape(gelu_shape)
    .setForward(gelu_forward, "cpu")
    .setBackward(gelu_backward, "cpu");
