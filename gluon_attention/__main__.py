"""``python -m gluon_attention fused-build|fused-check``: build or check the fused kernel."""
import argparse
import sys

from .core import fused

__all__ = ['main']


def main(argv=None):
    """Returns the exit status: 0 on success, 1 when the kernel cannot be built or loaded."""
    parser = argparse.ArgumentParser(
        prog='python -m gluon_attention',
        description='Build or check the fused attention kernel library (gluon_attention.fused).',
        allow_abbrev=False)
    parser.add_argument('command', choices=['fused-build', 'fused-check'],
                        help='fused-build: compile it (skipped when up to date); '
                             'fused-check: load it')
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
