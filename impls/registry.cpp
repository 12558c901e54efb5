#include "impls/registry.hpp"

#include <stdexcept>
#include <string>

#include "core/precision.hpp"
#include "impls/cpu_blocked/cpu_blocked.hpp"
#include "impls/cpu_naive/cpu_naive.hpp"
#ifdef ATTN_HAVE_CUDA
#include "impls/cuda_cublas/cuda_cublas.hpp"
#include "impls/cuda_fused/cuda_fused.hpp"
#endif

namespace attn {

Tensor make_weights(const Problem& p) {
  Tensor w(working_dtype(p.numerics()), {p.batch, p.h_q, p.n_q, p.n_k});
  w.poison();
  return w;
}

void Registry::add(std::unique_ptr<Implementation> implementation) {
  if (find(implementation->name()) != nullptr)
    throw std::invalid_argument("implementation '" + implementation->name() + "' is registered twice");
  implementations_.push_back(std::move(implementation));
}

const Implementation* Registry::find(std::string_view name) const {
  for (const auto& impl : implementations_)
    if (impl->name() == name) return impl.get();
  return nullptr;
}

std::vector<const Implementation*> Registry::all() const {
  std::vector<const Implementation*> out;
  for (const auto& impl : implementations_) out.push_back(impl.get());
  return out;
}

std::vector<std::string> Registry::names() const {
  std::vector<std::string> out;
  for (const auto& impl : implementations_) out.push_back(impl->name());
  return out;
}

const std::vector<std::string>& builtin_implementation_names() {
  static const std::vector<std::string> names{"cpu_naive", "cpu_blocked", "cuda_cublas", "cuda_cublas_tf32", "cuda_fused"};
  return names;
}

void register_builtin_implementations(Registry& registry) {
  register_cpu_naive(registry);
  register_cpu_blocked(registry);
#ifdef ATTN_HAVE_CUDA
  // Registered wherever the build has CUDA; without a device they skip every case with the reason.
  register_cuda_cublas(registry);
  register_cuda_fused(registry);
#endif
}

}  // namespace attn
