// The worker threads of the operators (fused_attention.cc, fused_rowwise.cc; not included by
// the per-instruction-set kernel files, whose code may share no template with the others).
#ifndef GA_PARALLEL_H_
#define GA_PARALLEL_H_

#include <functional>

namespace ga {

// Runs work(w) for w in [0, workers) on `workers` threads, the caller's among them: the
// OpenMP thread pool of the calling thread (the runtime MXNet's oneDNN products run on, so no
// second set of threads competes with the workers that OpenMP keeps spinning after a
// product), or, with the environment variable GA_THREAD_POOL=std, threads started for the
// call. Defined in fused_attention.cc.
void parallel(int workers, const std::function<void(int)>& work);

}  // namespace ga

#endif  // GA_PARALLEL_H_
