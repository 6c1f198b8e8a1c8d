"""Building the fused attention kernel library (:mod:`gluon_attention.core.fused`).

The sources in ``csrc/`` are compiled against the headers of the ``mxnet`` wheel: the operators
(``fused_attention.cc``, ``fused_rowwise.cc``) for any x86-64 CPU, and one kernel file per instruction set, each with
its own ``-m`` flags, so that no instruction of AVX-512 can run on a CPU without it (the
library chooses its kernels at load time). The files compile two at a time into objects, each
instruction-set object is checked to share no code with the others, and the link output is
renamed into place.
"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import mxnet as mx

__all__ = ['build', 'library_path']

_CSRC = pathlib.Path(__file__).parent / 'csrc'
# The operators (built for any x86-64 CPU) and one kernel file per instruction set, each with its
# own flags: code compiled for AVX-512 must never run on an AVX2-only CPU.
_UNITS = (('fused_attention.cc', ()),
          ('fused_rowwise.cc', ()),
          ('fused_adamw.cc', ()),
          # bfloat16 tensors through lib_api.cc (see _LIB_API_FLAGS), the conversions' choice
          ('bf16_io.cc', ()),
          ('kernel_avx2.cc', ('-mavx2', '-mfma')),
          ('kernel_avx512.cc', ('-mavx512f', '-mavx512bw', '-mavx512dq', '-mavx512vl', '-mavx2',
                                '-mfma')),
          # the bfloat16 forward pass on AMX tiles: run only where the CPU has them and Linux
          # granted the tile state (ga_fused_amx_problem), chosen at every call
          ('kernel_amx.cc', ('-mavx512f', '-mavx512bw', '-mavx512dq', '-mavx512vl',
                             '-mavx512bf16', '-mamx-tile', '-mamx-bf16', '-mavx2', '-mfma')),
          # float32 -> bfloat16 with AVX512-BF16's instruction: chosen where the CPU has it
          ('kernel_bf16.cc', ('-mavx512f', '-mavx512bw', '-mavx512vl', '-mavx512bf16')))
_ISA_NAMESPACE = {'kernel_avx2.cc': 'ga_avx2', 'kernel_avx512.cc': 'ga_avx512',
                  'kernel_amx.cc': 'ga_amx', 'kernel_bf16.cc': 'ga_bf16'}
# Instruction sets a compiler may not know (gcc before 11: AMX): a unit that fails with them is
# compiled again without them, and then builds only stubs that the operator never chooses.
_OPTIONAL_FLAGS = {'kernel_amx.cc': ('-mavx512bf16', '-mamx-tile', '-mamx-bf16'),
                   'kernel_bf16.cc': ('-mavx512bf16',)}
# MXNet's lib_api.cc builds no tensor of bfloat16's type code for a compute function: its
# _opCallFCompute is compiled under another name, and bf16_io.cc's _opCallFCompute hands the
# bfloat16 tensors to it under another 2-byte code (csrc/bf16_io.h).
_LIB_API_FLAGS = ('-D_opCallFCompute=ga_lib_api_fcompute',)


def library_path():
    """Where the compiled kernel library lives (inside the package, next to its source)."""
    return pathlib.Path(__file__).parent / '_lib' / 'libga_fused_attention.so'


def _mxnet_dirs():
    root = pathlib.Path(mx.__file__).parent
    return root / 'include', root / 'src' / 'lib_api.cc'


def _up_to_date(target):
    """The library is newer than every file of csrc/ (sources, headers, included bodies)."""
    if not target.exists():
        return False
    newest = max(p.stat().st_mtime for p in _CSRC.iterdir() if p.is_file())
    return target.stat().st_mtime >= newest


def _compile_all(compiler, include, lib_api, workdir):
    """Compile every unit to an object file in ``workdir`` (two at a time); returns their paths.

    Raises FileNotFoundError when the compiler cannot run, RuntimeError when it fails."""
    base = [compiler, '-c', '-fPIC', '-O3', '-std=c++17', '-pthread', '-fopenmp', '-I',
            str(include)]
    jobs = [(str(_CSRC / name), flags) for name, flags in _UNITS] + [(str(lib_api),
                                                                      _LIB_API_FLAGS)]
    objects, running = [], []
    for i, (source, flags) in enumerate(jobs):
        obj = os.path.join(workdir, '{}.o'.format(i))
        cmd = base + list(flags) + [source, '-o', obj]
        try:
            running.append((cmd, subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                                  stderr=subprocess.PIPE, text=True)))
        except OSError as err:           # the compiler cannot be run at all
            for _, proc in running:
                proc.wait()
            raise FileNotFoundError('cannot run the C++ compiler {!r}: {}'.format(
                compiler, err)) from None
        objects.append(obj)
        if len(running) == 2 or i == len(jobs) - 1:
            for cmd_done, proc in running:
                _finish(cmd_done, proc)
            running = []
    return objects


def _finish(cmd, proc):
    """Wait for the compile ``cmd`` (``[..., source, '-o', object]``) run by ``proc``; a unit of
    ``_OPTIONAL_FLAGS`` that fails is compiled again without those flags. Raises RuntimeError
    when the (last) compile fails."""
    _, err = proc.communicate()
    returncode, optional = proc.returncode, _OPTIONAL_FLAGS.get(os.path.basename(cmd[-3]), ())
    if returncode and optional:
        cmd = [arg for arg in cmd if arg not in optional]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        returncode, err = done.returncode, done.stderr
    if returncode:
        raise RuntimeError('building the fused attention kernel failed:\n{}\n{}'.format(
            ' '.join(cmd), err[-4000:]))


def _check_isa_object(obj, namespace):
    """An instruction-set object may define no weak (linker-shared) symbol outside its own
    namespace: the linker could pick its AVX-512 copy of an inline or template function for
    the AVX2 path. Skipped without ``nm``."""
    nm = shutil.which('nm')
    if not nm:
        return
    listing = subprocess.run([nm, obj], capture_output=True, text=True, check=False).stdout
    shared = [line.split()[-1] for line in listing.splitlines()
              if len(line.split()) == 3 and line.split()[1] in 'WVu' and
              namespace not in line.split()[-1]]
    if shared or '_GLOBAL__sub_I' in listing:
        raise RuntimeError('building the fused attention kernel failed: {} shares code with '
                           'the other instruction sets or runs code at load: {}'.format(
                               obj, ', '.join(shared[:5]) or 'a static initializer'))


def build(compiler=None, force=False, quiet=False):
    """Compile the kernel library (about a minute); returns its path.

    The build writes to a temporary file and renames it into place, so an interrupted build
    never leaves a broken library behind. It is skipped when the library is newer than every
    file of ``csrc/``.

    Raises
    ------
    FileNotFoundError
        No C++ compiler (``$CXX``, ``g++`` or ``c++``) or no MXNet headers.
    RuntimeError
        The compiler failed (its output is in the message).
    """
    target = library_path()
    if not force and _up_to_date(target):
        return target
    compiler = compiler or os.environ.get('CXX') or shutil.which('g++') or shutil.which('c++')
    if not compiler:
        raise FileNotFoundError('building the fused attention kernel needs a C++ compiler '
                                '(g++ or $CXX); none was found on PATH')
    include, lib_api = _mxnet_dirs()
    if not (include / 'mxnet' / 'lib_api.h').exists() or not lib_api.exists():
        raise FileNotFoundError('the mxnet package has no lib_api.h / lib_api.cc under {}'
                                .format(include.parent))
    target.parent.mkdir(parents=True, exist_ok=True)
    if not quiet:
        print('building', target.name, '...', file=sys.stderr)
    with tempfile.TemporaryDirectory(dir=str(target.parent)) as workdir:
        objects = _compile_all(compiler, include, lib_api, workdir)
        for (name, _), obj in zip(_UNITS, objects):
            if name in _ISA_NAMESPACE:
                _check_isa_object(obj, _ISA_NAMESPACE[name])
        tmp = os.path.join(workdir, target.name)
        cmd = [compiler, '-shared', '-pthread', '-fopenmp'] + objects + ['-o', tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode:
            raise RuntimeError('linking the fused attention kernel failed:\n{}\n{}'.format(
                ' '.join(cmd), proc.stderr[-4000:]))
        os.replace(tmp, target)
    return target
