"""The jobs and their tools: SQuAD and NLI training, evaluation and prediction, training
utilities, export, benchmark helpers. The top layer: scripts call it."""
