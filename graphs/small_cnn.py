"""A small convolutional network for MNIST, written as a user would bring it to ppt_dask:
``ppt-dask train mnist --model graphs.small_cnn:small_cnn`` from the repository's root (the
current folder is searched first). It is the race's module in ``graphs/torch_step.py``.
"""

from torch import nn


def small_cnn() -> nn.Module:
    """Two convolutions and two dense layers, 26,474 parameters: PyTorch's MNIST example
    (``examples/mnist``) narrowed to 10 and 20 channels and a 64-unit dense layer, without dropout."""
    return nn.Sequential(
        nn.Conv2d(1, 10, kernel_size=5), nn.ReLU(), nn.MaxPool2d(2),    # 10 x 12 x 12
        nn.Conv2d(10, 20, kernel_size=5), nn.ReLU(), nn.MaxPool2d(2),   # 20 x 4 x 4
        nn.Flatten(),
        nn.Linear(20 * 4 * 4, 64), nn.ReLU(),
        nn.Linear(64, 10),
    )
