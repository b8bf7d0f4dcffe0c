"""A small convolutional network of one's own for ``--model`` (not one of ppt_dask.nets.examples):
two convolutions and two dense layers, 26,930 parameters, for MNIST images (1, 28, 28).

    ppt-dask train mnist --model graphs.small_cnn:small_cnn --workers 8 --epochs 1

(run from the repository's root: the current folder is searched first). graphs/README.md,
"Settings chosen by the number of workers", uses it to check that a module trained at p = 8
learns about as much in one epoch as at p = 1.
"""

from torch import nn


def small_cnn() -> nn.Module:
    """8 and 16 channels of 5x5 convolutions, each with ReLU and 2x2 max pooling, then 88
    hidden units: 26,930 parameters."""
    return nn.Sequential(
        nn.Conv2d(1, 8, kernel_size=5), nn.ReLU(), nn.MaxPool2d(2),    # 8 x 12 x 12
        nn.Conv2d(8, 16, kernel_size=5), nn.ReLU(), nn.MaxPool2d(2),   # 16 x 4 x 4
        nn.Flatten(),
        nn.Linear(16 * 4 * 4, 88), nn.ReLU(),
        nn.Linear(88, 10),
    )
