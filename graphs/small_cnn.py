"""Small convolutional networks of one's own for ``--model`` (not ppt_dask.nets.examples), for
MNIST images (1, 28, 28), written as a user would bring them to ppt_dask:

    ppt-dask train mnist --model graphs.small_cnn:small_cnn --workers 8 --epochs 1
    ppt-dask train mnist --model graphs.small_cnn:torch_example_cnn --workers 1 --epochs 1

(run from the repository's root: the current folder is searched first). graphs/README.md,
"Settings chosen by the number of workers", uses ``small_cnn`` to check that a module trained at
p = 8 learns about as much in one epoch as at p = 1; ``graphs/torch_step.py`` races
``torch_example_cnn`` against a plain PyTorch loop.
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


def torch_example_cnn() -> nn.Module:
    """Two convolutions and two dense layers, 26,474 parameters: PyTorch's MNIST example
    (``examples/mnist``) narrowed to 10 and 20 channels and a 64-unit dense layer, without dropout."""
    return nn.Sequential(
        nn.Conv2d(1, 10, kernel_size=5), nn.ReLU(), nn.MaxPool2d(2),    # 10 x 12 x 12
        nn.Conv2d(10, 20, kernel_size=5), nn.ReLU(), nn.MaxPool2d(2),   # 20 x 4 x 4
        nn.Flatten(),
        nn.Linear(20 * 4 * 4, 64), nn.ReLU(),
        nn.Linear(64, 10),
    )
