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
    # namespace packages: the data and source folders (resources, csrc, _lib) count as part of
    # the package, so setuptools ships their files without warning
    packages=find_namespace_packages(include=['gluon_attention', 'gluon_attention.*'],
                                     exclude=['*.__pycache__']),
    package_data={'gluon_attention': ['resources/*', 'resources/*/*', 'resources/*/*/*', 'core/csrc/*',
                                     'core/_lib/*.so']},
    include_package_data=True,
    install_requires=[
        'mxnet==1.9.1',
        'numpy==1.23.5',
        'tokenizers==0.23.3',
        'safetensors==0.8.0',
        'tqdm==4.70.1',
        'matplotlib==3.10.9',
    ],
    extras_require={
        'test': ['pytest==9.2.0', 'hypothesis==6.170.17', 'gluonnlp==0.10.0'],
    },
)
