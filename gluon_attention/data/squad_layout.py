"""Where a tokenizer puts its special tokens around a (question, context) pair.

A BERT tokenizer lays a pair out ``[CLS] question [SEP] context [SEP]`` with token types 0 for
``[CLS] question [SEP]`` and 1 for ``context [SEP]`` (Devlin et al., 2019); a RoBERTa tokenizer
lays it out ``<s> question </s></s> context </s>`` with no token types, all 0 (Liu et al.,
2019). The layout is read from the tokenizer's post-processor, the part of a ``tokenizers``
tokenizer that adds the special tokens (``BertProcessing``, ``RobertaProcessing`` or a
``TemplateProcessing`` pair template, alone or inside a ``Sequence``), so the SQuAD features of
any model folder are laid out as its own tokenizer lays out a pair. A tokenizer without a
post-processor gets the BERT layout when it knows ``[CLS]`` and ``[SEP]``.
"""
import dataclasses
import json

from .._checks import fail

__all__ = ['PairLayout', 'pair_layout']


@dataclasses.dataclass(frozen=True)
class PairLayout:
    """The special tokens around a (question, context) pair and the token types of its parts.

    Attributes
    ----------
    prefix, middle, suffix : tuple of (int, int)
        (token id, token type) of the special tokens before the question (at least one: the
        token at position 0 stands for the null answer), between question and context, and
        after the context.
    query_type, context_type : int
        The token type of every question token and of every context token.
    """
    prefix: tuple
    middle: tuple
    suffix: tuple
    query_type: int = 0
    context_type: int = 1

    @property
    def num_special(self):
        """Special tokens a pair gets (int): 3 for BERT, 4 for RoBERTa."""
        return len(self.prefix) + len(self.middle) + len(self.suffix)

    def context_offset(self, query_length):
        """Position (int) of the first context token after a question of that many tokens."""
        return len(self.prefix) + query_length + len(self.middle)

    def input_ids(self, query, context):
        """``prefix query middle context suffix`` (list of int) for lists of token ids."""
        ids = [[i for i, _ in part] for part in (self.prefix, self.middle, self.suffix)]
        return ids[0] + list(query) + ids[1] + list(context) + ids[2]

    def token_types(self, query_length, context_length):
        """The token type (list of int) of each position of :meth:`input_ids`."""
        types = [[t for _, t in part] for part in (self.prefix, self.middle, self.suffix)]
        return (types[0] + [self.query_type] * query_length + types[1]
                + [self.context_type] * context_length + types[2])


def _bert(cls, sep):
    return PairLayout(((cls, 0),), ((sep, 0),), ((sep, 1),))


def _from_template(processor):
    """The layout of a ``TemplateProcessing`` pair template ($A the question, $B the context)."""
    ids = {name: token['ids'] for name, token in processor['special_tokens'].items()}
    parts, sequences = [[]], []
    for piece in processor['pair']:
        if 'Sequence' in piece:
            sequences.append(piece['Sequence'])
            parts.append([])
        else:
            special = piece['SpecialToken']
            parts[-1] += [(i, special['type_id']) for i in ids[special['id']]]
    if [sequence['id'] for sequence in sequences] != ['A', 'B']:
        return None    # the question then the context, once each, is the only pair read
    return PairLayout(*map(tuple, parts), query_type=sequences[0]['type_id'],
                      context_type=sequences[1]['type_id'])


def _from_processor(processor):
    """The layout a serialized post-processor (dict) describes, or None."""
    kind = processor.get('type')
    if kind == 'Sequence':
        layouts = [_from_processor(p) for p in processor.get('processors', [])]
        layouts = [layout for layout in layouts if layout is not None]
        return layouts[-1] if layouts else None
    if kind == 'BertProcessing':
        return _bert(processor['cls'][1], processor['sep'][1])
    if kind == 'RobertaProcessing':       # no token types: every position has type 0
        cls, sep = processor['cls'][1], processor['sep'][1]
        return PairLayout(((cls, 0),), ((sep, 0), (sep, 0)), ((sep, 0),), 0, 0)
    if kind == 'TemplateProcessing':
        return _from_template(processor)
    return None


def pair_layout(tokenizer):
    """The pair layout of a ``tokenizers.Tokenizer`` (see the module docstring).

    Parameters
    ----------
    tokenizer : tokenizers.Tokenizer

    Returns
    -------
    PairLayout

    Raises
    ------
    ValueError
        The tokenizer's post-processor describes no (question, context) pair with a special
        token first (the null answer's position), or, without a post-processor, the tokenizer
        lacks ``[CLS]`` or ``[SEP]``.
    """
    processor = tokenizer.post_processor
    if processor is None:
        special_ids = tuple(tokenizer.token_to_id(t) for t in ('[CLS]', '[SEP]'))
        if None in special_ids:
            fail('expected a tokenizer with a post-processor that lays out a pair (as a BERT '
                 'or RoBERTa tokenizer.json has) or with the tokens [CLS] and [SEP]',
                 special_ids=special_ids)
        return _bert(*special_ids)
    state = json.loads(processor.__getstate__())
    layout = _from_processor(state)
    if layout is None or not layout.prefix:
        fail('expected a tokenizer whose post-processor lays out a (question, context) pair '
             'with a special token first (BertProcessing, RobertaProcessing or a pair '
             'template)', post_processor=state)
    return layout
