"""GloVe word vectors (Pennington et al., 2014): reading the text format and filling an
embedding's rows with them."""
import gzip
import os

import mxnet as mx
import numpy as onp

from .. import _checks
from .._resources import missing_file

__all__ = ['GLOVE_URL', 'read_glove', 'load_glove_embedding']

#: Where the official GloVe vectors are published.
GLOVE_URL = 'https://nlp.stanford.edu/projects/glove/'


def read_glove(path):
    """Read a GloVe text file (``word v1 ... vd`` per line, no header; plain or ``.gz``).

    Returns
    -------
    dict
        word -> float32 (d,) vector (the first occurrence of a word wins).

    Raises
    ------
    ValueError
        When the file is missing, empty, or a line has a different number of values.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        missing_file(path, 'GloVe', GLOVE_URL)
    opener = gzip.open if path.endswith('.gz') else open
    vectors, dim = {}, None
    with opener(path, 'rt', encoding='utf-8') as handle:
        for number, line in enumerate(handle, 1):
            parts = line.rstrip('\n').rstrip(' ').split(' ')
            if len(parts) < 2:
                continue
            dim = dim or len(parts) - 1
            if len(parts) - 1 != dim:
                _checks.fail('every GloVe line must hold a word and {} values'.format(dim),
                             **{'values on line {}'.format(number): len(parts) - 1})
            word = parts[0]
            if word not in vectors:
                vectors[word] = onp.asarray(parts[1:], dtype=onp.float32)
    if not vectors:
        _checks.fail('the GloVe file holds no vectors', path=path)
    return vectors


def load_glove_embedding(embedding, path, idx_to_token, token_counts=None):
    """Overwrite the rows of an initialized embedding with GloVe vectors where the word is known.

    Parameters
    ----------
    embedding : gluon.nn.Embedding
        Initialized, weight (V, C) with V = ``len(idx_to_token)``.
    path : str or Path
        GloVe text file (plain or ``.gz``) with C-dimensional vectors.
    idx_to_token : list of str
        Token of each row; tokens not in the file keep their random initialization.
    token_counts : Mapping[str, int], optional
        Token frequencies, to also report the share of running tokens covered.

    Returns
    -------
    dict
        Coverage report: ``path``, ``dim``, ``vocab_size``, ``glove_words``, ``found`` (rows
        overwritten), ``coverage`` (found / vocab_size), ``token_coverage`` (or None),
        ``missing_examples`` (up to 10 uncovered tokens, in vocabulary order).
    """
    vectors = read_glove(path)
    weight = embedding.weight.data()
    dim = len(next(iter(vectors.values())))
    if weight.shape != (len(idx_to_token), dim):
        _checks.fail('the embedding weight must have shape (len(idx_to_token), GloVe dim) = ({}, {})'
                     .format(len(idx_to_token), dim), **{'weight.shape': weight.shape})
    table = weight.asnumpy()
    found = onp.array([t in vectors for t in idx_to_token], dtype=bool)
    for i in onp.flatnonzero(found):
        table[i] = vectors[idx_to_token[i]]
    embedding.weight.set_data(mx.np.array(table, dtype=table.dtype))
    token_coverage = None
    if token_counts:
        total = sum(token_counts.values())
        token_coverage = sum(c for t, c in token_counts.items() if t in vectors) / max(total, 1)
    return {'path': os.fspath(path), 'dim': dim, 'vocab_size': len(idx_to_token),
            'glove_words': len(vectors), 'found': int(found.sum()),
            'coverage': float(found.mean()) if found.size else 0.0,
            'token_coverage': token_coverage,
            'missing_examples': [t for t, f in zip(idx_to_token, found) if not f][:10]}
