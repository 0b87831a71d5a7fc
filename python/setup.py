"""hfa's Python package in one command, one CMake run: libhfa.so (the library) and libhfa_torch.so
(its ops registered with PyTorch, python/CMakeLists.txt), against the torch already installed.

    pip install ./python                        # from the repository's root
    pip install --no-build-isolation ./python   # the same, with the build tools already installed

Needs: nvcc (CUDA 13), cmake >= 3.25, a C++17 compiler, torch (installed in the interpreter that
runs pip). The CuTe headers are fetched by scripts/setup.sh --cute-only when absent.
Environment: HFA_BUILD_DIR, the CMake build folder (default <repo>/build-python; an existing,
configured one, such as the tests' build/, is reused as it is: only the ops are added);
HFA_CMAKE_ARGS, extra CMake arguments (e.g. "-DHFA_HEAD_DIMS=128" to build less);
HFA_BUILD_JOBS, parallel compile jobs (default: the CPU count; ~10 GB of memory per two jobs).
"""
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

here = Path(__file__).resolve().parent
root = here.parent
package = here / "src" / "hfa"

# pip's isolated build environment hides the interpreter's site-packages (through PYTHONPATH, which
# carries its sitecustomize). The build runs its tools without that: torch, and cmake / ninja when
# they are pip-installed Python entry points, are those of the environment the package goes into.
OUTER_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}

_TORCH_QUERY = ("import os, torch; print(os.path.dirname(torch.__file__)); "
                "print(int(torch._C._GLIBCXX_USE_CXX11_ABI))")


def find_torch():
    """(torch package folder, its _GLIBCXX_USE_CXX11_ABI) of the torch the package will import."""
    try:  # --no-build-isolation: the build's interpreter sees the installed torch
        import torch
        return os.path.dirname(torch.__file__), int(torch._C._GLIBCXX_USE_CXX11_ABI)
    except ImportError:
        pass
    # An isolated build: ask the same interpreter outside the isolation, so the ops are built
    # against the torch that will load them, not a second one downloaded for the build.
    r = subprocess.run([sys.executable, "-c", _TORCH_QUERY], env=OUTER_ENV, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"hfa: torch is not installed in {sys.executable}; install torch first "
                 f"(the ops are built against it):\n{r.stderr}")
    torch_dir, abi = r.stdout.split()
    return torch_dir, int(abi)


def cmake_build():
    build = Path(os.environ.get("HFA_BUILD_DIR", root / "build-python")).resolve()
    extra = shlex.split(os.environ.get("HFA_CMAKE_ARGS", ""))
    if not (root / "third_party" / "cutlass" / "include" / "cute").is_dir() and \
            not any(a.startswith("-DCUTLASS_DIR") for a in extra):
        subprocess.check_call([str(root / "scripts" / "setup.sh"), "--cute-only"], env=OUTER_ENV)
    torch_dir, abi = find_torch()
    configure = ["cmake", "-S", str(root), "-B", str(build), "-DHFA_BUILD_TORCH_OPS=ON",
                 f"-DHFA_TORCH_DIR={torch_dir}", f"-DHFA_TORCH_CXX11_ABI={abi}"]
    if not (build / "CMakeCache.txt").exists():  # a new folder: the package needs no tests
        configure += ["-DCMAKE_BUILD_TYPE=Release", "-DHFA_BUILD_TESTS=OFF", "-DHFA_BUILD_BENCH=OFF"]
        if shutil.which("ninja", path=OUTER_ENV.get("PATH")):
            configure += ["-G", "Ninja"]
    subprocess.check_call(configure + extra, env=OUTER_ENV)
    jobs = os.environ.get("HFA_BUILD_JOBS", str(os.cpu_count() or 2))
    subprocess.check_call(["cmake", "--build", str(build), "--target", "hfa", "hfa_torch", "-j", jobs],
                          env=OUTER_ENV)
    for old in list(package.glob("libhfa.so*")) + list(package.glob("libhfa_torch.so")):
        old.unlink()
    # libhfa.so.0 (the name libhfa_torch.so asks for; a symlink to libhfa.so.0.1.0, copied as the
    # file: wheels hold no links) and the ops.
    for lib in (build / "libhfa.so.0", build / "libhfa_torch.so"):
        shutil.copy2(lib, package / lib.name, follow_symlinks=True)


class BuildWithCMake(build_py):
    def run(self):
        cmake_build()
        super().run()


class BinaryDistribution(Distribution):
    """A platform wheel: the package carries shared libraries."""

    def has_ext_modules(self):
        return True


setup(
    # src layout: running a script from python/ (bench_peers.py) imports the installed package,
    # not this source folder.
    package_dir={"": "src"},
    packages=["hfa", "hfa.integrations"],
    package_data={"hfa": ["libhfa.so*", "libhfa_torch.so"]},
    cmdclass={"build_py": BuildWithCMake},
    distclass=BinaryDistribution,
)
