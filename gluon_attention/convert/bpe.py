"""RoBERTa's byte-level BPE (GPT-2's: Radford et al., 2019) as a ``tokenizers`` tokenizer with
the token ids of a GluonNLP 0.10 RoBERTa vocabulary.

0.10's RoBERTa vocabulary lists GPT-2's byte-level tokens (``'Ġworld'``: a space becomes
``'Ġ'``) in the order of fairseq's dictionary, the order RoBERTa's embedding rows follow; it
keeps no merges file. With the merges file of the pretrained RoBERTa (or GPT-2: the same
merges), the tokenizer splits text as 0.10's ``GPT2BPETokenizer`` does (GPT-2's pattern, no
prefix space, merges applied by rank) and the vocabulary gives the ids; a pair is laid out
``<s> A </s></s> B </s>``.
"""
import pathlib

from .. import _checks
from .._optional import require

__all__ = ['read_merges', 'bpe_tokenizer']


def read_merges(merges_file):
    """The merges of a ``merges.txt`` (``#version`` line and blank lines skipped), by rank.

    Parameters
    ----------
    merges_file : str or os.PathLike
        One merge a line: two tokens separated by a space.

    Returns
    -------
    list of (str, str)

    Raises
    ------
    ValueError
        A line that is not two tokens.
    """
    merges = []
    for number, line in enumerate(pathlib.Path(merges_file).read_text(
            encoding='utf-8').splitlines(), 1):
        if not line.strip() or line.startswith('#version'):
            continue
        parts = line.split(' ')
        if len(parts) != 2 or not all(parts):
            _checks.fail('each line of a merges file must be two tokens separated by a space',
                         **{'merges_file line {}'.format(number): line})
        merges.append(tuple(parts))
    return merges


def bpe_tokenizer(vocab, merges_file):
    """The byte-level BPE ``tokenizers.Tokenizer`` (RoBERTa's pair layout) of a vocabulary and
    a merges file; its ``save('tokenizer.json')`` writes a model folder's tokenizer.

    Parameters
    ----------
    vocab : dict
        As :func:`gluon_attention.convert.vocab.read_vocab` returns a 0.10 RoBERTa vocabulary;
        it must hold ``<s>`` and ``</s>``.
    merges_file : str or os.PathLike
        The pretrained RoBERTa's (or GPT-2's) ``merges.txt``.

    Returns
    -------
    tokenizers.Tokenizer

    Raises
    ------
    ValueError
        A malformed merges file, a merge whose tokens or result the vocabulary lacks (the
        first ones named), or a vocabulary without ``<s>`` or ``</s>``.
    """
    # pylint: disable=import-outside-toplevel
    require('tokenizers')
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    ids = {token: i for i, token in enumerate(vocab['tokens'])}
    merges = read_merges(merges_file)
    foreign = [' '.join(pair) for pair in merges
               if pair[0] not in ids or pair[1] not in ids or pair[0] + pair[1] not in ids]
    if foreign:
        _checks.fail('every merge and its result must be tokens of the vocabulary (the merges '
                     "file of the model's own pretrained RoBERTa)", merges=foreign[:3])
    missing = [token for token in ('<s>', '</s>') if token not in ids]
    if missing:
        _checks.fail('a RoBERTa vocabulary must hold <s> and </s>', missing=missing)
    tokenizer = Tokenizer(models.BPE(ids, merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.RobertaProcessing(('</s>', ids['</s>']),
                                                            ('<s>', ids['<s>']),
                                                            add_prefix_space=False)
    return tokenizer
