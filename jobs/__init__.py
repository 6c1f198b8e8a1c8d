"""The jobs built on the library, one room per product (not part of the installed package; the
scripts in ``scripts/`` run them from the repository root): ``engine`` (what every job shares)
at the bottom, the two jobs ``squad`` and ``nli`` (siblings) on it, ``bench`` and ``serve``
(siblings) on top. The jobs import :mod:`gluon_attention` through its public modules only; the
library never imports them."""
