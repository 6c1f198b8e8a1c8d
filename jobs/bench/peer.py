"""A peer process of the benchmarks, talking JSON lines: the PyTorch side of a comparison runs
in its own interpreter (``.venv-peer`` as ``make bench`` creates it), answers one request per
line, and is timed in the same rounds as ours.

The protocol: the peer writes one JSON line when it is ready (e.g. ``{"ready": true, "torch":
"2.13.0"}``), then answers each JSON line read from its standard input with one JSON line.
Its standard error goes to a file, quoted when the peer stops answering.
"""
import json
import subprocess

__all__ = ['PeerProcess']


class PeerProcess:
    """A JSON-lines peer process.

    Parameters
    ----------
    command : list of str
        The peer's command line (interpreter, script, options).
    log : str
        File that receives the peer's standard error.
    env : dict, optional
        The peer's environment (default: this process's).

    Attributes
    ----------
    ready : dict
        The peer's first line (what it says about itself, e.g. its torch version).

    Raises
    ------
    RuntimeError
        When the peer exits or closes its output before answering (the message quotes the end
        of its standard error).
    """

    def __init__(self, command, log, env=None):
        self.log = log
        with open(log, 'w') as handle:
            self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=handle, text=True, env=env)
        self.ready = self._reply()

    def _reply(self):
        line = self.proc.stdout.readline()
        if not line:
            with open(self.log) as handle:
                raise RuntimeError('the peer {} stopped: {}'.format(
                    ' '.join(self.proc.args[1:2]), handle.read()[-500:]))
        return json.loads(line)

    def ask(self, request):
        """Send ``request`` (a dict, one JSON line) and return the peer's reply (a dict)."""
        self.proc.stdin.write(json.dumps(request) + '\n')
        self.proc.stdin.flush()
        return self._reply()

    def close(self):
        """Close the peer's input (it exits at the end of its loop) and wait for it."""
        self.proc.stdin.close()
        self.proc.wait()
        self.proc.stdout.close()
