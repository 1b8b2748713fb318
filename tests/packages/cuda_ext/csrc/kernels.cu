// Two small kernels: an elementwise saxpy and a row-wise RMSNorm (one block per row,
// float accumulation, warp-shuffle + shared-memory reduction).
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

namespace {

template <typename T>
__global__ void saxpy_kernel(const T* __restrict__ x, const T* __restrict__ y, T* __restrict__ out,
                             float alpha, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)blockDim.x * gridDim.x) {
    out[i] = static_cast<T>(alpha * static_cast<float>(x[i]) + static_cast<float>(y[i]));
  }
}

template <typename T>
__global__ void rmsnorm_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ out,
                               int64_t cols, float eps) {
  const int64_t row = blockIdx.x;
  const T* xr = x + row * cols;
  T* outr = out + row * cols;
  float acc = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = static_cast<float>(xr[c]);
    acc += v * v;
  }
  for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffff, acc, offset);
  __shared__ float warp_sums[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = lane < (blockDim.x + 31) / 32 ? warp_sums[lane] : 0.f;
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffff, acc, offset);
    if (lane == 0) warp_sums[0] = acc;
  }
  __syncthreads();
  const float inv = rsqrtf(warp_sums[0] / static_cast<float>(cols) + eps);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    outr[c] = static_cast<T>(static_cast<float>(xr[c]) * inv * static_cast<float>(w[c]));
  }
}

}  // namespace

torch::Tensor saxpy_cuda(const torch::Tensor& x, const torch::Tensor& y, double alpha) {
  TORCH_CHECK(x.is_cuda() && y.is_cuda(), "saxpy: tensors must be on CUDA");
  TORCH_CHECK(x.sizes() == y.sizes() && x.scalar_type() == y.scalar_type(), "saxpy: shape/dtype mismatch");
  const c10::cuda::CUDAGuard guard(x.device());
  auto xc = x.contiguous(), yc = y.contiguous();
  auto out = torch::empty_like(xc);
  const int64_t n = xc.numel();
  if (n == 0) return out;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, xc.scalar_type(), "saxpy", [&] {
    saxpy_kernel<scalar_t><<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<scalar_t>(), yc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
        static_cast<float>(alpha), n);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

torch::Tensor rmsnorm_cuda(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  TORCH_CHECK(x.is_cuda() && weight.is_cuda(), "rmsnorm: tensors must be on CUDA");
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == x.size(-1), "rmsnorm: weight must match the last dim");
  const c10::cuda::CUDAGuard guard(x.device());
  auto xc = x.contiguous(), wc = weight.to(x.scalar_type()).contiguous();
  auto out = torch::empty_like(xc);
  const int64_t cols = xc.size(-1);
  const int64_t rows = cols == 0 ? 0 : xc.numel() / cols;
  if (rows == 0) return out;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, xc.scalar_type(), "rmsnorm", [&] {
    rmsnorm_kernel<scalar_t><<<static_cast<unsigned>(rows), 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<scalar_t>(), wc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), cols,
        static_cast<float>(eps));
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
