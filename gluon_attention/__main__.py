"""``python -m gluon_attention fused-build|fused-check``: build or check the fused kernel;
``python -m gluon_attention convert --from gluonnlp ...``: convert a GluonNLP 0.10 model."""
import argparse
import sys

from .core import fused

__all__ = ['main']


def _sizes(text):
    """``--sizes`` text -> {key: int}: comma-separated KEY=N, KEY one of the convertible sizes
    (gluon_attention.convert.SIZE_KEYS), N a positive integer; each key at most once."""
    from .convert import SIZE_KEYS  # pylint: disable=import-outside-toplevel
    sizes = {}
    for item in (part.strip() for part in text.split(',')):
        key, _, value = item.partition('=')
        if not item:
            continue
        if key not in SIZE_KEYS or not value.isdigit() or int(value) <= 0 or key in sizes:
            raise argparse.ArgumentTypeError(
                'expected comma-separated KEY=N with KEY one of {} (each at most once) and N a '
                'positive integer, e.g. num_layers=4,units=256; {!r} is not. Received: '
                '--sizes={!r}'.format(', '.join(SIZE_KEYS), item, text))
        sizes[key] = int(value)
    return sizes


def _convert_parser(architectures):
    parser = argparse.ArgumentParser(
        prog='python -m gluon_attention convert', allow_abbrev=False,
        description='Convert a GluonNLP 0.10 BERT-family model (save_parameters .params file '
                    'and its vocabulary) into a model folder (config.json, model.safetensors, '
                    'tokenizer, head), or a model folder back into a 0.10 .params file.')
    parser.add_argument('--from', dest='source', choices=['gluonnlp'],
                        help='convert from a GluonNLP 0.10 .params file')
    parser.add_argument('--to', dest='target', choices=['gluonnlp', 'transformers'],
                        help='convert the folder --model-dir: gluonnlp into the .params file '
                             '--params; transformers into the folder --output-dir')
    parser.add_argument('--model', choices=sorted(architectures),
                        help='the 0.10 zoo name of the architecture (with --from)')
    parser.add_argument('--params', help='the .params file (read or written)')
    parser.add_argument('--vocab', help="0.10's vocabulary JSON (.vocab) or a WordPiece "
                                        'vocab.txt (with --from)')
    parser.add_argument('--output-dir', help='the model folder to write (with --from)')
    parser.add_argument('--model-dir', help='the model folder to read (with --to)')
    parser.add_argument('--sizes', type=_sizes, default={},
                        help='a model built at other sizes than the zoo name: comma-separated '
                             'KEY=N of num_layers, units, hidden_size, num_heads, max_length')
    parser.add_argument('--merges', help="RoBERTa: the pretrained RoBERTa's merges.txt; with "
                                         'it (and --vocab) the folder gets its byte-level BPE '
                                         'tokenizer, without it none (with --from)')
    case = parser.add_mutually_exclusive_group()
    case.add_argument('--lower', dest='lower', action='store_true', default=None,
                      help='the tokenizer lowercases (default: from the vocabulary)')
    case.add_argument('--cased', dest='lower', action='store_false',
                      help='the tokenizer keeps case')
    return parser


def _summary(result):
    """The success line of a conversion, e.g. ``wrote out: encoder, span head, tokenizer``."""
    parts = ['encoder'] + ['{} head'.format(result['head'])] * bool(result['head']) + [
        'tokenizer'] * bool(result['tokenizer'])
    return 'wrote {}: {}'.format(result['output_dir'], ', '.join(parts))


def convert_main(argv):
    """``convert``: a GluonNLP 0.10 ``.params`` file -> a model folder, or back with
    ``--to gluonnlp``, or that folder for transformers with ``--to transformers``. Returns the
    exit status: 0 on success, 2 on refused input or a missing extra (``hf``)."""
    from .convert import (  # pylint: disable=import-outside-toplevel
        ARCHITECTURES, from_gluonnlp, to_gluonnlp, to_transformers)
    from .convert.gluonnlp import SIZES_HINT  # pylint: disable=import-outside-toplevel
    parser = _convert_parser(ARCHITECTURES)
    args = parser.parse_args(argv)
    if (args.source is None) == (args.target is None):
        parser.error('give exactly one of --from gluonnlp and --to gluonnlp|transformers')
    needed = {'gluonnlp': ('model_dir', 'params'), 'transformers': ('model_dir', 'output_dir'),
              None: ('model', 'params', 'vocab', 'output_dir')}[args.target]
    missing = ['--' + name.replace('_', '-') for name in needed if getattr(args, name) is None]
    if missing:
        parser.error('{} required with --{}'.format(', '.join(missing),
                                                   'from' if args.source else 'to'))
    try:
        if args.target:
            print(to_transformers(args.model_dir, args.output_dir) if args.target ==
                  'transformers' else to_gluonnlp(args.model_dir, args.params))
            return 0
        result = from_gluonnlp(args.params, args.model, args.vocab, args.output_dir,
                               lower=args.lower, sizes=args.sizes or None,
                               merges_file=args.merges)
    except (ValueError, FileNotFoundError, ImportError) as err:    # ImportError: an extra
        print('error: {}'.format(err), file=sys.stderr)
        if SIZES_HINT in str(err):
            print('(on the command line: --sizes KEY=N,..., e.g. --sizes num_layers=4,units=256)',
                  file=sys.stderr)
        return 2
    print(_summary(result))
    return 0


def main(argv=None):
    """Returns the exit status: 0 on success, 1 when the kernel cannot be built or loaded."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ['convert']:
        return convert_main(argv[1:])
    parser = argparse.ArgumentParser(
        prog='python -m gluon_attention',
        description='Build or check the fused attention kernel library (gluon_attention.fused), '
                    'or convert a GluonNLP 0.10 model into a model folder and back '
                    '(python -m gluon_attention convert --help).',
        allow_abbrev=False)
    parser.add_argument('command', choices=['fused-build', 'fused-check', 'convert'],
                        help='fused-build: compile it (skipped when up to date); '
                             'fused-check: load it; convert: see convert --help')
    parser.add_argument('--force', action='store_true', help='rebuild even when up to date')
    parser.add_argument('--optional', action='store_true',
                        help='a failed build is a warning (exit 0): the library then runs on '
                             'its composed operators')
    args = parser.parse_args(argv)
    if args.command == 'fused-build':
        try:
            path = fused.build(force=args.force)
        except (FileNotFoundError, RuntimeError) as err:
            print('{}: fused attention kernel not built: {}'.format(
                'warning' if args.optional else 'error', err), file=sys.stderr)
            if args.optional:
                print('gluon_attention will run on its composed operators', file=sys.stderr)
            return 0 if args.optional else 1
        print(path)
        return 0
    if fused.load():
        print('fused attention kernel loaded from {}'.format(fused.library_path()))
        return 0
    print(fused.load_error(), file=sys.stderr)
    return 1


if __name__ == '__main__':
    sys.exit(main())
