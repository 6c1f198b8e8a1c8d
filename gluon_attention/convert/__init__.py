"""Model conversion: GluonNLP 0.10 model zoo files to and from this library's model folder, and
that folder for Hugging Face transformers."""
from .gluonnlp import ARCHITECTURES, SIZE_KEYS, encoder_config, from_gluonnlp, to_gluonnlp
from .huggingface import to_transformers

__all__ = ['ARCHITECTURES', 'SIZE_KEYS', 'encoder_config', 'from_gluonnlp', 'to_gluonnlp',
           'to_transformers']
