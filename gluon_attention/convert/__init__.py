"""Model conversion: GluonNLP 0.10 model zoo files to and from this library's model folder."""
from .gluonnlp import ARCHITECTURES, encoder_config, from_gluonnlp, to_gluonnlp

__all__ = ['ARCHITECTURES', 'encoder_config', 'from_gluonnlp', 'to_gluonnlp']
