"""Typed job configurations: one dataclass per job holds every option, its default and its help;
the command line is generated from it, and a run writes it to ``<output-dir>/run_config.json``.

A field is declared with :func:`option`; its type comes from the default (``bool`` fields become
``--name/--no-name`` switches). A field declared with :func:`recipe_option` shapes the trained
model (data, sizes, optimisation, seed): :func:`recipe` gathers them, the recipe a checkpoint
records and must match to resume
(:func:`~jobs.engine.checkpoints.check_resume`); the other options (where to
write, devices, threads, progress bars, evaluation) may change between a killed run and its
resumption. ``config.json`` is reserved for model folders.
"""
import argparse
import dataclasses
import json
import os
import re

from gluon_attention import checks

from .common import atomic_write_json

__all__ = ['option', 'recipe_option', 'recipe', 'add_arguments', 'from_args',
           'parse_command', 'write_run_config', 'read_run_config', 'RUN_CONFIG',
           'NUMERICS_VARIABLES', 'as_flags']

RUN_CONFIG = 'run_config.json'


def option(default, help, choices=None):  # pylint: disable=redefined-builtin
    """A config field with its default, help text and optional choices (shown by ``--help``)."""
    return dataclasses.field(default=default, metadata={'help': help, 'choices': choices})


def recipe_option(default, help, choices=None):  # pylint: disable=redefined-builtin
    """An :func:`option` that is part of the training recipe (see the module docstring)."""
    field = option(default, help, choices)
    return dataclasses.field(default=default, metadata=dict(field.metadata, recipe=True))


def recipe(config):
    """The recipe options of ``config`` (a dataclass instance) as a dict, in field order."""
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
            if f.metadata.get('recipe')}


def add_arguments(parser, config_class, skip=()):
    """Add one ``--field-name`` flag per field of ``config_class`` (defaults shown in help)."""
    for field in dataclasses.fields(config_class):
        if field.name in skip:
            continue
        flag = '--' + field.name.replace('_', '-')
        meta = dict(field.metadata)
        text = '{} (default: {})'.format(meta.get('help', ''), field.default)
        if isinstance(field.default, bool):
            parser.add_argument(flag, dest=field.name, default=field.default, help=text,
                                action=argparse.BooleanOptionalAction)
        else:
            kind = type(field.default) if field.default is not None else str
            parser.add_argument(flag, dest=field.name, default=field.default, type=kind,
                                choices=meta.get('choices'), help=text, metavar=None)
    return parser


def from_args(config_class, namespace):
    """The config whose fields are the namespace's values of the same names."""
    values = vars(namespace)
    return config_class(**{f.name: values[f.name] for f in dataclasses.fields(config_class)
                           if f.name in values})


#: The environment variables that change a run's numbers, recorded in ``run_config.json``:
#: MXNET_SAFE_ACCUMULATION=1 makes MXNet's reductions (softmax, sums, norms) accumulate in a wider
#: type (float64 for float32), and the thread count can change the order of summation.
NUMERICS_VARIABLES = ('MXNET_SAFE_ACCUMULATION', 'OMP_NUM_THREADS')
#: The key of ``run_config.json`` that holds them (not an option).
ENVIRONMENT = 'environment'


def parse_command(parser, argv, default='train'):
    """The namespace of a script with sub-commands (each sub-parser sets ``parser`` to itself).

    No command, or options first, run ``default`` (which takes no positional argument); a first
    word that is not a command is argparse's invalid choice, listing the commands; an unknown
    option is reported with the usage of its sub-command, not the top-level one."""
    argv = list(argv)
    if not argv or (argv[0].startswith('-') and argv[0] not in ('-h', '--help')):
        argv = [default] + argv
    namespace, unknown = parser.parse_known_args(argv)
    if unknown:
        getattr(namespace, 'parser', parser).error(
            'unrecognized arguments: {}'.format(' '.join(unknown)))
    return namespace


def write_run_config(folder, config):
    """Write ``config`` (a dataclass) to ``folder/run_config.json``, with the values of
    :data:`NUMERICS_VARIABLES` (None: unset) under ``environment``; returns the path."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, RUN_CONFIG)
    atomic_write_json(path, dict(dataclasses.asdict(config), **{ENVIRONMENT: {
        name: os.environ.get(name) for name in NUMERICS_VARIABLES}}))
    return path


def read_run_config(folder, config_class):
    """The config a run wrote to ``folder/run_config.json`` (unknown keys raise ValueError; the
    recorded ``environment`` is left out)."""
    path = os.path.join(folder, RUN_CONFIG)
    with open(path, encoding='utf-8') as handle:
        values = json.load(handle)
    values.pop(ENVIRONMENT, None)
    names = {f.name for f in dataclasses.fields(config_class)}
    unknown = sorted(set(values) - names)
    if unknown:
        checks.fail('{} holds options this version does not know'.format(path), options=unknown)
    return config_class(**values)


def as_flags(error, config_class):
    """The message of a library error as the command line says it: an argument name that leads a
    sentence of it, or stands alone in parentheses, and is a field of ``config_class`` (a config
    dataclass, or a collection of names) becomes its flag (``model_dir must ...`` ->
    ``--model-dir must ...``; ``(data_dir)`` -> ``(--data-dir)``); the ``Received:`` part keeps
    the argument's name."""
    names = ({field.name for field in dataclasses.fields(config_class)}
             if dataclasses.is_dataclass(config_class) else set(config_class))
    head, mark, tail = str(error).partition('Received:')
    head = re.sub(r'(^|; |\()([a-z][a-z0-9_]*)(?= must |\))',
                  lambda m: m.group(1) + ('--' + m.group(2).replace('_', '-')
                                          if m.group(2) in names else m.group(2)), head)
    return head + mark + tail
