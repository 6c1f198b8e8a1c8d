"""The options of ``scripts/serve.py`` (``make serve``), declared once: ``--help`` and the
instance's ``instance.json`` are generated from them."""
import dataclasses

from gluon_attention.core.matmul import MATMUL_DTYPES

from ..engine.config import option

__all__ = ['ServeConfig', 'JVM_ARGS']

#: The frontend's JVM options: one garbage-collector thread, the client compiler only (the frontend
#: only moves bytes between sockets), no performance-data file in the system's /tmp.
JVM_ARGS = '-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-UsePerfData'


@dataclasses.dataclass
class ServeConfig:
    """One server instance: what it serves, where it keeps its files, its ports and its batching.

    The server binds 127.0.0.1 only. Everything the instance writes (config.properties, the
    model store, pid file, worker sockets, unpacked archives, logs) stays under
    ``instance_dir``, so instances with different folders and ports never collide.
    """
    model_dir: str = option('runs/squad/model', 'the fine-tuned model folder to serve (as '
                            'run_squad.py train writes it)')
    graph: str = option('', "prefix of its exported QAInference graph; '': <run>/export/qa "
                        'beside the model folder when present, else exported into '
                        '<instance-dir>/export/qa')
    instance_dir: str = option('runs/serve', "this instance's folder (config, pid file, "
                               'sockets, temporary files, logs)')
    port: int = option(8080, 'inference port on 127.0.0.1 (POST /predictions/<model-name>)')
    management_port: int = option(8081, 'management port on 127.0.0.1')
    model_name: str = option('squad', 'the model name in the URL')
    workers: int = option(1, 'worker processes (each holds one copy of the model)')
    threads: int = option(2, 'OpenMP threads of each worker')
    batch_size: int = option(8, 'requests the server batches into one handler call')
    max_batch_delay: int = option(20, 'milliseconds the server waits to fill a batch')
    null_score_diff_threshold: str = option(
        'auto', "answer '' where a question's null score difference exceeds this number; "
                "'auto': the threshold saved in the model folder")
    matmul_dtype: str = option('float32', "dtype of the graph's dense products; 'bfloat16' (CPU, "
                               'oneDNN; fast where the worker gets AMX) casts the product '
                               'weights once when a worker loads the graph (the archive stays '
                               'float32)', choices=MATMUL_DTYPES)
    features_per_pass: int = option(32, 'features in one forward pass at most (a batch whose '
                                    'questions make more runs several passes)')
    response_timeout: int = option(120, 'seconds a worker may take for one batch before the '
                                   'server restarts it')
    start_timeout: int = option(300, 'seconds start waits for the model to answer')
    jvm_args: str = option(JVM_ARGS, "options of the server's Java frontend (its vmargs): "
                           'a serial garbage collector and the quick compiler only, which start '
                           'it on about half the CPU time of the defaults; no hsperfdata file')
