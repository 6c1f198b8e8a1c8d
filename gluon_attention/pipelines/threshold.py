"""The null threshold of a SQuAD 2.0 model, in one form from parsing to use: :class:`NullThreshold`.

A question's answer is '' (no answer) where its null score difference
``min over chunks of log P(impossible) - log P(answerable)`` exceeds the threshold. A fine-tuned
folder's ``qa_config.json`` and a calibration record it as ``null_threshold`` (float or None) and
``null_threshold_source`` (str): :meth:`NullThreshold.saved` reads that record and
:meth:`NullThreshold.record` writes it.
"""
import dataclasses
import math
import numbers
from typing import Optional

from .._checks import fail, fail_type

__all__ = ['NullThreshold', 'NEVER_NULL', 'AUTO']

#: The source of an unresolved threshold: the model folder's saved one is used.
AUTO = 'auto'
#: The threshold source of a SQuAD 1.1 model (``version_2_with_negative`` 0): '' is never
#: predicted.
NEVER_NULL = "none (version_2_with_negative 0: '' is never predicted)"


@dataclasses.dataclass(frozen=True)
class NullThreshold:
    """The null score difference threshold and where it came from.

    Attributes
    ----------
    value : float or None
        The threshold (a log-probability difference; ``inf``: '' is never predicted); None only
        for ``'auto'`` before the model folder's saved threshold is known (see :meth:`resolve`).
    source : str
        ``'auto'`` (not yet resolved), who gave it (``'argument'``, ``'flag'``), the saved source
        (e.g. ``'held-out articles Huguenot'``) or :data:`NEVER_NULL`.
    """
    value: Optional[float]
    source: str

    @classmethod
    def of(cls, given, source='argument', name='threshold'):
        """The threshold a caller gave, in any of the accepted spellings.

        Parameters
        ----------
        given : None, 'auto', float, str or NullThreshold
            None or ``'auto'``: the saved threshold (resolved later); a number (not nan; ``inf``
            never predicts ''); a string holding a finite number (as a command line gives it);
            a NullThreshold is returned as it is.
        source : str
            The source recorded with a number.
        name : str
            The argument's name, for the error message.

        Raises
        ------
        ValueError
            ``nan``, or a string that is neither ``'auto'`` nor a finite number.
        TypeError
            Any other kind of value (a bool included).
        """
        if isinstance(given, NullThreshold):
            return given
        if given is None or given == AUTO:
            return cls(None, AUTO)
        if isinstance(given, str):
            try:
                value = float(given)
            except ValueError:
                value = math.nan
            if not math.isfinite(value):
                fail("{} must be 'auto' or a finite number".format(name), **{name: given})
            return cls(value, source)
        if not isinstance(given, numbers.Real) or isinstance(given, bool):
            return fail_type('{} must be None, a number or a NullThreshold'.format(name),
                             **{name: given})
        if math.isnan(given):
            fail('{} must be a number, not nan'.format(name), **{name: given})
        return cls(float(given), source)

    @classmethod
    def saved(cls, record):
        """The threshold a ``qa_config.json`` or a calibration records (``null_threshold``,
        None for none, and ``null_threshold_source``)."""
        value = record.get('null_threshold')
        return cls(None if value is None else float(value),
                   record.get('null_threshold_source', AUTO))

    def record(self):
        """``{'null_threshold': value, 'null_threshold_source': source}``, as saved."""
        return {'null_threshold': self.value, 'null_threshold_source': self.source}

    def resolve(self, saved, version_2, name='threshold'):
        """The threshold to decode with: this one when it has a value, else the saved one.

        Parameters
        ----------
        saved : dict or NullThreshold
            The saved threshold (a record as :meth:`saved` reads, e.g. a ``qa_config.json``).
        version_2 : bool or int
            False: a SQuAD 1.1 model, ``NullThreshold(inf, NEVER_NULL)`` whatever was given.
        name : str
            The name the caller gave this threshold under, for the error message.

        Raises
        ------
        ValueError
            ``'auto'`` for a SQuAD 2.0 model without a saved threshold.
        """
        if not version_2:
            return NullThreshold(math.inf, NEVER_NULL)
        if self.value is not None:
            return self
        saved = saved if isinstance(saved, NullThreshold) else NullThreshold.saved(saved)
        if saved.value is None:
            fail('{} must be a number for a model folder without a null threshold (trained '
                 'with version_2_with_negative 0)'.format(name), **{name: AUTO})
        return saved
