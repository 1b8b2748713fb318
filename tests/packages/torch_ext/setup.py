"""A small C++ torch extension (CUDA when torch_ext_tiny/kernel.cu is present): the fleet build
cache's test and bench fixture (tests/support/torchext.py packs it into an sdist).

Built without build isolation against the installed torch. Each compile appends a line to the
file ``$TORCH_EXT_BUILDS`` names (host and pid), so a test counts the compiles of a fleet;
``$TORCH_EXT_HOLD`` names a file the compile creates and then waits for to vanish (a test kills
the builder meanwhile).
"""

import os
import socket
import time
from pathlib import Path

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

HERE = Path(__file__).resolve().parent
CUDA = (HERE / "torch_ext_tiny" / "kernel.cu").is_file()


class CountedBuild(BuildExtension):
    def build_extensions(self):
        if os.environ.get("TORCH_EXT_BUILDS"):
            with open(os.environ["TORCH_EXT_BUILDS"], "a") as f:
                f.write(f"{socket.gethostname()} {os.getpid()}\n")
        hold = os.environ.get("TORCH_EXT_HOLD")
        if hold:
            Path(hold).touch()
            while Path(hold).exists():
                time.sleep(0.2)
        super().build_extensions()


if CUDA:
    ext = CUDAExtension(
        "torch_ext_tiny._C",
        ["torch_ext_tiny/ext.cpp", "torch_ext_tiny/kernel.cu"],
        extra_compile_args={"cxx": ["-DTORCH_EXT_CUDA"], "nvcc": []},
    )
else:
    ext = CppExtension("torch_ext_tiny._C", ["torch_ext_tiny/ext.cpp"])

setup(ext_modules=[ext], cmdclass={"build_ext": CountedBuild})
