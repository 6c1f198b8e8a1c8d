"""Shared articles and paragraphs between two sets of SQuAD questions (leakage checks).

Titles are compared after :func:`normalize_title` (Unicode NFC, case folded, underscores and
whitespace runs made one space, stripped), so ``huguenot `` and ``Huguenot`` are one article;
paragraphs by :func:`paragraph_key` (the context with its whitespace runs made one space),
whatever the title they are filed under.
"""
import dataclasses
import hashlib
import unicodedata

__all__ = ['normalize_title', 'paragraph_key', 'Overlap', 'find_overlap', 'overlap_between',
           'MAX_LISTED']

#: How many titles and question ids an :class:`Overlap` lists (the counts are complete).
MAX_LISTED = 10


def normalize_title(title):
    """The comparison form of an article title: NFC, case folded, '_' and whitespace runs made
    one space, stripped.

    >>> normalize_title(' Huguenot_Wars\\t ') == normalize_title('huguenot  wars')
    True
    """
    text = unicodedata.normalize('NFC', title).casefold().replace('_', ' ')
    return ' '.join(text.split())


def paragraph_key(context):
    """The first 16 hex digits of the sha1 of ``context`` with its whitespace runs made one
    space (the ``trained_paragraphs`` record of a model folder)."""
    return hashlib.sha1(' '.join(context.split()).encode('utf-8')).hexdigest()[:16]


@dataclasses.dataclass
class Overlap:
    """What two sets of questions share (the questions listed are those of the checked side).

    Attributes
    ----------
    shared_titles : list of str
        The checked side's titles, as written, whose normalised form the other side holds.
    shared_paragraphs : int
        How many distinct paragraphs of the checked side the other side holds.
    titles_to_fix : list of str
        The checked side's titles, as written, holding a shared article or paragraph.
    question_ids : list of str
        The first :data:`MAX_LISTED` question ids of the checked side in those articles or
        paragraphs (file order); ``num_questions`` counts them all.
    num_questions : int
    """
    shared_titles: list
    shared_paragraphs: int
    titles_to_fix: list
    question_ids: list
    num_questions: int

    def __bool__(self):
        return bool(self.shared_titles or self.shared_paragraphs)

    def received(self):
        """The fields as keyword arguments of ``_checks.fail`` (lists cut to MAX_LISTED)."""
        return {'shared_titles': self.shared_titles[:MAX_LISTED],
                'shared_paragraphs': self.shared_paragraphs,
                'titles_to_fix': self.titles_to_fix[:MAX_LISTED],
                'question_ids': self.question_ids, 'num_questions': self.num_questions}


def find_overlap(checked, titles=(), paragraph_keys=()):
    """What the questions ``checked`` share with a set of titles and paragraphs.

    Parameters
    ----------
    checked : list of SquadExample
        The questions checked (e.g. the evaluation questions against the training record).
    titles : iterable of str
        The other side's titles, as written (compared normalised).
    paragraph_keys : iterable of str
        The other side's paragraphs as :func:`paragraph_key` values.

    Returns
    -------
    Overlap
    """
    normal = {normalize_title(t) for t in titles}
    keys = set(paragraph_keys)
    shared_titles, paragraphs, fix, ids = set(), set(), [], []
    for example in checked:
        by_title = normalize_title(example.title) in normal
        key = paragraph_key(example.context)
        if by_title:
            shared_titles.add(example.title)
        if key in keys:
            paragraphs.add(key)
        if by_title or key in keys:
            ids.append(example.qas_id)
            if example.title not in fix:
                fix.append(example.title)
    return Overlap(sorted(shared_titles), len(paragraphs), fix, ids[:MAX_LISTED], len(ids))


def overlap_between(checked, other):
    """:func:`find_overlap` of ``checked`` against the titles and paragraphs of the questions
    ``other``."""
    return find_overlap(checked, {e.title for e in other},
                        {paragraph_key(c) for c in {e.context for e in other}})
