"""NVRTC through ctypes, shared by scripts/kernel_check.py and the design probes
(scripts/probe_*.py): no NumPy, no CuPy, so `--compile-only` runs on a machine without a GPU."""

import ctypes
import os
import sys


def cuda_include():
    """The CUDA include directory that has cuda_bf16.h: KILN_CUDA_INCLUDE, CUDA_HOME/include or
    /usr/local/cuda/include (exits with a message when none has it)."""
    for d in (os.environ.get("KILN_CUDA_INCLUDE"),
              os.path.join(os.environ["CUDA_HOME"], "include") if os.environ.get("CUDA_HOME") else None,
              "/usr/local/cuda/include"):
        if d and os.path.isfile(os.path.join(d, "cuda_bf16.h")):
            return d
    sys.exit("no CUDA include directory with cuda_bf16.h: set KILN_CUDA_INCLUDE")


def compile_unit(unit, name, headers, opts):
    """Compiles the source `unit` (bytes) named `name` with `headers` ((name, bytes) pairs the unit
    may #include) and the NVRTC options `opts`; returns (cubin bytes, log). Raises OSError when
    libnvrtc cannot be loaded, RuntimeError when the compile fails."""
    lib = None
    for soname in ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"):
        try:
            lib = ctypes.CDLL(soname)
            break
        except OSError:
            pass
    if lib is None:
        raise OSError("libnvrtc not loadable through ctypes")
    arr = lambda xs: (ctypes.c_char_p * len(xs))(*xs)
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), unit, name.encode(), len(headers),
                                arr([t for _, t in headers]), arr([n.encode() for n, _ in headers]))
    if rc:
        raise RuntimeError(f"nvrtcCreateProgram: {rc}")
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr([o.encode() for o in opts]))
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    log = log.value.decode(errors="replace").strip()
    if rc:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
        raise RuntimeError(f"NVRTC failed ({rc}):\n{log}")
    lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    cubin = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetCUBIN(prog, cubin)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return cubin.raw, log
