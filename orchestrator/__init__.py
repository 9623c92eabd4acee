"""Declarative A/B experiments for PyTorch training throughput.

Importing this package is cheap on purpose: trial processes import only what they use, so the
fixed cost per trial stays close to ``python -c "import torch"``.
"""

__version__ = "0.1.0"
