"""Serving the fine-tuned QA model with Multi Model Server (the ``[serve]`` extra and a Java
runtime): the request protocol, the handler, the model archive and one server instance."""
from .config import ServeConfig
from .instance import (JAVA_PACKAGE, MAX_REQUEST_BYTES, MAX_RESPONSE_BYTES, SERVE_EXTRA,
                       ServeSetupError, check_runtime, instance_paths, kill_workers, model_pids,
                       running_pid, start, stop, worker_pids)
from .protocol import ANSWER_KEYS, Limits, RequestError, http_request, parse_request

__all__ = ['ServeConfig', 'JAVA_PACKAGE', 'SERVE_EXTRA', 'ServeSetupError', 'check_runtime',
           'http_request', 'instance_paths', 'kill_workers', 'running_pid', 'start', 'stop',
           'worker_pids', 'model_pids', 'MAX_REQUEST_BYTES', 'MAX_RESPONSE_BYTES', 'ANSWER_KEYS',
           'Limits', 'RequestError', 'parse_request']
