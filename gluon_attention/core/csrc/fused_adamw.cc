// The AdamW update of one float32 parameter for MXNet 1.9.1 (CPU), in the library of the fused
// attention: the arithmetic of MXNet's own adamw_update (src/operator/contrib/adamw-inl.h),
// operation for operation in float32, so that weight, mean and var come out bit for bit as
// MXNet's operator leaves them; split over the worker threads (MXNet's operator runs on one
// thread). Built for any x86-64 CPU with no extra instruction set: the compiler vectorizes the
// loop with SSE2, whose square root, division, products and sums round as the scalar ones do
// (no fused multiply-add exists there to change a rounding).
//
// Operator ga_adamw_update
//   inputs : weight, grad, mean, var: float32 arrays of one shape. mean and var are updated in
//            place; grad is read only (MXNet's operator also overwrites it with the rescaled
//            gradient).
//   attrs  : rescale_grad, lr, eta, beta1, beta2, epsilon, wd, clip_gradient (float32 values
//            written as decimal text; clip_gradient < 0: no clipping).
//   output : the updated weight (the call passes the weight itself as out=). With g the
//            gradient times rescale_grad, clipped to [-clip_gradient, clip_gradient] when
//            clip_gradient >= 0:
//              mean = beta1 * mean + (1 - beta1) * g
//              var  = beta2 * var + (1 - beta2) * (g * g)
//              weight = weight - eta * (lr * mean / (sqrt(var) + epsilon) + wd * weight)
//            A rescale_grad that is 0 or not finite leaves all three unchanged (MXNet's rule).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernel_api.h"
#include "parallel.h"
#include "mxnet/lib_api.h"

using namespace mxnet::ext;

namespace {

typedef std::unordered_map<std::string, std::string> Attrs;

struct AdamW {
  float rescale, lr, eta, beta1, beta2, epsilon, wd, clip;
};

// The attribute as float32 (strtof: nearest, underflow to 0 or a subnormal); false when it is
// missing or not a number.
bool attr(const Attrs& attrs, const char* name, float* value) {
  auto it = attrs.find(name);
  if (it == attrs.end() || it->second.empty()) return false;
  char* end = nullptr;
  *value = std::strtof(it->second.c_str(), &end);
  return *end == '\0';
}

void update(const AdamW& p, float* w, const float* g, float* m, float* v, long begin,
            long end) {
  const float keep1 = 1.f - p.beta1, keep2 = 1.f - p.beta2;
  for (long i = begin; i < end; ++i) {
    float gs = g[i] * p.rescale;
    if (p.clip >= 0.f) gs = gs > p.clip ? p.clip : (gs < -p.clip ? -p.clip : gs);
    const float mi = p.beta1 * m[i] + keep1 * gs;
    const float vi = p.beta2 * v[i] + keep2 * (gs * gs);
    m[i] = mi;
    v[i] = vi;
    w[i] = w[i] - p.eta * (p.lr * mi / (std::sqrt(vi) + p.epsilon) + p.wd * w[i]);
  }
}

// Arrays below this many entries run on the calling thread (starting threads costs more).
constexpr long kMinPerThread = 1L << 16;

MXReturnValue forward(const Attrs& attrs, std::vector<MXTensor>* in, std::vector<MXTensor>* out,
                      const OpResource& res) {
  AdamW p;
  if (!attr(attrs, "rescale_grad", &p.rescale) || !attr(attrs, "lr", &p.lr) ||
      !attr(attrs, "eta", &p.eta) || !attr(attrs, "beta1", &p.beta1) ||
      !attr(attrs, "beta2", &p.beta2) || !attr(attrs, "epsilon", &p.epsilon) ||
      !attr(attrs, "wd", &p.wd) || !attr(attrs, "clip_gradient", &p.clip)) {
    MX_ERROR_MSG << "ga_adamw_update: rescale_grad, lr, eta, beta1, beta2, epsilon, wd and "
                    "clip_gradient must all be given as numbers";
    return MX_FAIL;
  }
  float* w = out->at(0).data<float>();
  const float* w_in = in->at(0).data<float>();
  const long n = static_cast<long>(in->at(0).size());
  if (w != w_in) std::copy(w_in, w_in + n, w);
  if (p.rescale == 0.f || !std::isfinite(p.rescale)) return MX_SUCCESS;
  const float* g = in->at(1).data<float>();
  float* m = in->at(2).data<float>();
  float* v = in->at(3).data<float>();
  const long workers = std::max(1L, std::min<long>(ga::num_threads(), n / kMinPerThread));
  const long share = (n + workers - 1) / workers;
  std::atomic<long> next(0);  // shares taken in turn: correct with fewer threads than asked
  ga::parallel(static_cast<int>(workers), [&](int) {
    for (long t = next++; t < workers; t = next++)
      update(p, w, g, m, v, t * share, std::min(n, (t + 1) * share));
  });
  return MX_SUCCESS;
}

MXReturnValue parse(const Attrs& attrs, int* num_in, int* num_out) {
  *num_in = 4;
  *num_out = 1;
  return MX_SUCCESS;
}

MXReturnValue infer_type(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  for (size_t i = 0; i < in->size(); ++i) {
    if ((*in)[i] != -1 && (*in)[i] != kFloat32) {
      MX_ERROR_MSG << "ga_adamw_update: weight, grad, mean and var must be float32 (input "
                   << i << " has dtype code " << (*in)[i] << ")";
      return MX_FAIL;
    }
  }
  (*out)[0] = kFloat32;
  return MX_SUCCESS;
}

MXReturnValue infer_shape(const Attrs& attrs, std::vector<std::vector<unsigned int>>* in,
                          std::vector<std::vector<unsigned int>>* out) {
  for (size_t i = 1; i < in->size(); ++i) {
    if ((*in)[i] != (*in)[0]) {
      MX_ERROR_MSG << "ga_adamw_update: weight, grad, mean and var must have one shape (input "
                   << i << " differs from the weight's)";
      return MX_FAIL;
    }
  }
  (*out)[0] = (*in)[0];
  return MX_SUCCESS;
}

MXReturnValue mutate(const Attrs& attrs, std::vector<int>* input_indices) {
  *input_indices = {2, 3};     // mean and var
  return MX_SUCCESS;
}

}  // namespace

REGISTER_OP(ga_adamw_update)
    .setParseAttrs(parse)
    .setInferType(infer_type)
    .setInferShape(infer_shape)
    .setMutateInputs(mutate)
    .setForward(forward, "cpu");
