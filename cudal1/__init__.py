"""cudal1: train and evaluate language models that make PyTorch/CUDA programs faster.

The core package is importable with torch alone: no Prefect, MLflow or DVC in here.
"""

__version__ = "0.1.0"
