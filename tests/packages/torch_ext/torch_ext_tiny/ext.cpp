// a + alpha * b, element by element, as the operator torch.ops.torch_ext_tiny.scaled_add: on the
// CPU here, on the GPU by kernel.cu when it is built. Only the ATen headers it needs (no
// torch/extension.h, no pybind11): a compile of seconds, not minutes.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#ifdef TORCH_EXT_CUDA
at::Tensor scaled_add_cuda(const at::Tensor& a, const at::Tensor& b, double alpha);  // kernel.cu
#endif

namespace {

at::Tensor scaled_add_cpu(const at::Tensor& a, const at::Tensor& b, double alpha) {
  TORCH_CHECK(a.sizes() == b.sizes(), "a and b must have the same shape");
  TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat, "float32 only");
  auto ac = a.contiguous();
  auto bc = b.contiguous();
  auto out = at::empty_like(ac);
  const float* x = ac.data_ptr<float>();
  const float* y = bc.data_ptr<float>();
  float* z = out.data_ptr<float>();
  const int64_t n = ac.numel();
  for (int64_t i = 0; i < n; ++i) z[i] = x[i] + static_cast<float>(alpha) * y[i];
  return out;
}

bool cuda_built() {
#ifdef TORCH_EXT_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace

TORCH_LIBRARY(torch_ext_tiny, m) {
  m.def("scaled_add(Tensor a, Tensor b, float alpha) -> Tensor");
  m.def("cuda_built() -> bool", &cuda_built);
}

TORCH_LIBRARY_IMPL(torch_ext_tiny, CPU, m) { m.impl("scaled_add", &scaled_add_cpu); }

#ifdef TORCH_EXT_CUDA
TORCH_LIBRARY_IMPL(torch_ext_tiny, CUDA, m) { m.impl("scaled_add", &scaled_add_cuda); }
#endif
