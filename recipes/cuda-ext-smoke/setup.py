# A minimal torch CUDA extension: builds for TORCH_CUDA_ARCH_LIST (set by the recipe from the GPU).
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="kiln_smoke_ext",
    version="0.1.0",
    ext_modules=[CUDAExtension("kiln_smoke_ext", ["kiln_smoke_ext.cu"])],
    cmdclass={"build_ext": BuildExtension},
)
