"""envbuild's own CUDA extension for the GPU proof: two kernels with a torch binding.

Built by ``envbuild wheelhouse build tests/packages/cuda_ext/wheelhouse.toml`` without build
isolation, so it compiles against the torch installed in the target environment. Archs come
from TORCH_CUDA_ARCH_LIST (the spec sets 9.0).
"""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="envbuild-cuda-ext",
    version="0.1.0",
    packages=["envbuild_cuda_ext"],
    ext_modules=[
        CUDAExtension(
            "envbuild_cuda_ext._C",
            sources=["csrc/binding.cpp", "csrc/kernels.cu"],
            extra_compile_args={"cxx": ["-O3"], "nvcc": ["-O3", "--use_fast_math"]},
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    install_requires=["torch"],
)
