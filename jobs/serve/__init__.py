"""Serving the fine-tuned QA model with Multi Model Server (the ``[serve]`` extra and a Java
runtime): the request protocol (:mod:`.protocol`), the handler (:mod:`.handler`), the model
archive (:mod:`.archive`) and one server instance (:mod:`.instance`).

This file imports nothing: the archive carries the handler with the two modules it imports
(``protocol``, ``frame``) and this package's ``__init__`` files, so that the server's worker,
which runs outside the repository, imports ``jobs.serve.handler`` from the archive.
"""
