"""Packaging for gluon_attention (MXNet 1.9.1 Gluon attention library)."""
import re
from pathlib import Path

from setuptools import find_namespace_packages, setup

HERE = Path(__file__).parent
VERSION = re.search(r"__version__ = '([^']+)'",
                    (HERE / 'gluon_attention' / '__init__.py').read_text()).group(1)

setup(
    name='gluon_attention',
    version=VERSION,
    description='Attention for Apache MXNet 1.9.1 Gluon: masked softmax, additive, '
                'dot-product and multi-head attention, QA head, decomposable attention.',
    long_description=(HERE / 'README.md').read_text(encoding='utf-8'),
    long_description_content_type='text/markdown',
    license='Apache-2.0',
    python_requires='>=3.11,<3.12',
    # namespace packages: the source folders (csrc, _lib) count as part of the package, so
    # setuptools ships their files without warning. No data ships: the jobs read a data folder
    # (--data-dir, GA_DATA_DIR; see docs/data.md)
    packages=find_namespace_packages(include=['gluon_attention', 'gluon_attention.*'],
                                     exclude=['*.__pycache__']),
    package_data={'gluon_attention': ['core/csrc/*', 'core/_lib/*.so']},
    include_package_data=True,
    # Ranges here; the exact versions of a tested environment are in constraints.txt (make venv
    # installs with PIP_CONSTRAINT pointing at it). MXNet is deliberately not a requirement: the
    # CPU wheel (mxnet) and the CUDA wheels (mxnet-cu112, ...) are different distributions, and
    # requiring one would make pip install it over the other. Install the one you need first
    # (make venv: MXNET_PKG), or take the CPU wheel with the [cpu] extra.
    install_requires=[
        'numpy>=1.21,<1.24',          # MXNet 1.9.1 uses aliases that NumPy 1.24 removed
    ],
    # `import gluon_attention` imports none of these: each is imported where it is used.
    extras_require={
        'cpu': ['mxnet==1.9.1'],
        # Hugging Face checkpoints (model.safetensors) and tokenizers (tokenizer.json, vocab.txt)
        'hf': ['tokenizers>=0.13,<1', 'safetensors>=0.3,<1'],
        'plots': ['matplotlib>=3.5,<4'],
        'onnx': ['onnx==1.17.0', 'protobuf==3.20.3', 'onnxruntime==1.26.0', 'sympy>=1.12,<2',
                 'ml_dtypes>=0.5,<0.6'],
        # Multi Model Server: its frontend needs a Java runtime (a system package, see README)
        'serve': ['multi-model-server==1.1.11', 'model-archiver==1.0.3'],
        # the jobs of the repository (jobs/, scripts/): progress bars, checkpoints, tokenizers,
        # learning curves and attention maps
        'jobs': ['tqdm>=4.42,<5', 'tokenizers>=0.13,<1', 'safetensors>=0.3,<1',
                 'matplotlib>=3.5,<4'],
        'test': ['pytest>=7,<10', 'hypothesis>=6,<7', 'gluonnlp>=0.10,<0.11'],
        # the API reference (make docs): Sphinx with numpydoc, MXNet's and GluonNLP's tools
        'docs': ['sphinx>=9.0,<10', 'numpydoc>=1.11,<2'],
    },
)
