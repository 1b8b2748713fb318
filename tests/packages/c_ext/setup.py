"""A small C-extension fixture: compiles with gcc, declares torch like the CUDA sdists do."""

from setuptools import Extension, setup

setup(
    name="c-ext",
    version="1.2.0",
    packages=["c_ext"],
    ext_modules=[Extension("c_ext._fast", sources=["c_ext/fast.c"])],
    install_requires=["torch", "packaging", "ninja"],
)
