"""Builds tessera._tessera with the project's CMake (pyproject.toml holds the metadata).

The extension is the CMake target `_tessera`; setuptools only copies what CMake built. The build
directory is TESSERA_CMAKE_BUILD_DIR when set (an existing build: only what changed is rebuilt),
else build-pip/ beside this file. CMake options pass through TESSERA_CMAKE_ARGS."""
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("TESSERA_CMAKE_BUILD_DIR") or os.path.join(HERE, "build-pip")
        os.makedirs(build_dir, exist_ok=True)
        configure = ["cmake", "-S", HERE, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                     f"-DPython_EXECUTABLE={sys.executable}"]
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            configure += ["-G", "Ninja", "-DTESSERA_BUILD_TESTS=OFF"] if shutil.which("ninja") else []
        configure += shlex.split(os.environ.get("TESSERA_CMAKE_ARGS", ""))
        subprocess.check_call(configure)
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "_tessera", "-j", str(os.cpu_count() or 1)])
        built = os.path.join(build_dir, "python", "tessera", os.path.basename(self.get_ext_fullpath(ext.name)))
        if not os.path.exists(built):
            raise RuntimeError(f"CMake did not produce {built}: is pybind11-dev installed (scripts/setup.sh)?")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(built, target)


# setuptools' own scratch space stays out of the CMake build directory build/.
setup(ext_modules=[Extension("tessera._tessera", sources=[])], cmdclass={"build_ext": CMakeBuild},
      options={"build": {"build_base": os.path.join("build-pip", "setuptools")}})
