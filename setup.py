"""Build for mindio_adaptor: the Python package plus the pybind11 module `mindio_adaptor._native`
compiled from csrc/ (the controller and processor transport)."""
import glob
import os
import sys
import sysconfig

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import Extension, find_packages, setup

# Compile the C++ files in parallel (MINDIO_BUILD_JOBS, default: every core).
ParallelCompile("MINDIO_BUILD_JOBS", default=0).install()

native_sources = sorted(glob.glob("csrc/**/*.cpp", recursive=True))


def openssl_headers() -> bool:
    """TLS on the controller's link needs OpenSSL's headers (Debian: libssl-dev). A machine without them (a
    bare accelerator image) still builds, without TLS: configuring it there is then an error that says so.
    MINDIO_BUILD_WITHOUT_TLS=1 builds without it on purpose."""
    if os.environ.get("MINDIO_BUILD_WITHOUT_TLS") == "1":
        return False
    roots = ["/usr/include", "/usr/local/include", sysconfig.get_paths()["include"], os.path.join(sys.prefix, "include")]
    return any(os.path.exists(os.path.join(root, "openssl", "ssl.h")) for root in roots)


WITH_TLS = openssl_headers()
ext_modules = []
if native_sources:
    ext_modules.append(
        Pybind11Extension(
            "mindio_adaptor._native",
            native_sources,
            include_dirs=["csrc"],
            cxx_std=17,
            extra_compile_args=["-O2", "-Wall"],
            # A toolchain that links libstdc++ statically (seen: the CUDA image's /opt/gcc g++) puts a second
            # copy of it in the module; exported, its symbols mix with the copy torch loaded, and the first
            # number a C++ stream formats crashed the controller (docs/gpu_check.md). Kept private, each copy
            # stays whole; with a shared libstdc++ the flag changes nothing.
            extra_link_args=["-pthread", "-Wl,--exclude-libs,ALL"],
            libraries=["ssl", "crypto"] if WITH_TLS else [],  # TLS on the controller's link (csrc/net/tls.cpp)
            define_macros=[("MINDIO_WITH_TLS", "1")] if WITH_TLS else [],
        )
    )
# C, apart from the C++ module: it reads CPython's internal headers, which do not build as C++.
ext_modules.append(Extension("mindio_adaptor._fork_guard", ["csrc/fork_guard/fork_guard.c"], extra_compile_args=["-O2", "-Wall"]))

setup(
    name="mindio_adaptor",
    version="0.1.0",
    description="Fault tolerance for Megatron-LM training: replicated ZeRO-1 optimizer, dying-gasp "
    "checkpoints, online repair and process replacement, driven by a compact C++ controller.",
    python_requires=">=3.10",
    packages=find_packages(include=["mindio_adaptor", "mindio_adaptor.*", "mindio_ttp", "mindio_ttp.*",
                                    "mindx_elastic", "mindx_elastic.*"]),
    package_data={"mindio_adaptor": ["data/*.json"]},
    install_requires=["wrapt>=1.14", "numpy", "psutil", "prometheus_client"],
    extras_require={"timeline": ["matplotlib"]},
    ext_modules=ext_modules,
    cmdclass={"build_ext": build_ext},
    entry_points={"console_scripts": ["mindio-adaptor=mindio_adaptor.cli:main"]},
)
