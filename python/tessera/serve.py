"""A trained model answering predictions, as `tessera serve` runs it (docs/serving.md).

    from tessera.serve import Predictor
    p = Predictor("runs/cnn")                    # a run, a checkpoint directory or model.safetensors
    probabilities = p.predict(images)            # [n, 1, 28, 28] -> [n, 10]
"""
from ._tessera.serve import Predictor  # noqa: F401
