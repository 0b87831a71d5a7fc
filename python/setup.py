"""Builds the thin binding hfa._C against the CMake-built libhfa (no kernel code here).

The library comes from HFA_BUILD_DIR (default: ../build). If it is not built yet, this runs the
project's CMake build first (scripts/setup.sh must have fetched the CuTe headers). libhfa.so is
copied into the package and found through an $ORIGIN rpath.
"""
import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

here = Path(__file__).resolve().parent
root = here.parent
build = Path(os.environ.get("HFA_BUILD_DIR", root / "build")).resolve()

libs = sorted(build.glob("libhfa.so*"))
if not libs:
    subprocess.check_call(["cmake", "-S", str(root), "-B", str(build), "-G", "Ninja",
                           "-DCMAKE_BUILD_TYPE=Release", "-DHFA_BUILD_TESTS=OFF"])
    subprocess.check_call(["cmake", "--build", str(build), "--target", "hfa"])
    libs = sorted(build.glob("libhfa.so*"))
for lib in libs:  # libhfa.so, .so.0, .so.0.1.0: keep the symlinks' targets as files
    shutil.copy2(lib, here / "src" / "hfa" / lib.name, follow_symlinks=True)

setup(
    # src layout: running a script from python/ (bench_peers.py) imports the installed package,
    # not this source folder.
    package_dir={"": "src"},
    packages=["hfa", "hfa.integrations"],
    package_data={"hfa": ["libhfa.so*"]},
    ext_modules=[CUDAExtension(
        name="hfa._C",
        sources=["src/hfa/csrc/binding.cpp"],
        include_dirs=[str(root / "include")],
        library_dirs=[str(build)],
        libraries=["hfa"],
        extra_link_args=["-Wl,-rpath,$ORIGIN"],
        extra_compile_args={"cxx": ["-O2"]},
    )],
    cmdclass={"build_ext": BuildExtension},
)
