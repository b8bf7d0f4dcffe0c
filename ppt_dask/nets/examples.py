"""Networks of one's own for ppt_dask, as a user writes them: functions that return a
``torch.nn.Module``. Copy one into a file of yours (``mynets.py``) and point the command line
at it, ``ppt-dask train mnist --model mynets:lenet5`` (the current folder is searched first),
or use these where ppt_dask is installed::

    ppt-dask train mnist --model ppt_dask.nets.examples:lenet5
    ppt-dask train mnist --model ppt_dask.nets.examples:lenet5 --workers 2 --strategy block --block 1000 --lr 0.1

or give one to the API, ``ppt.TorchNet(lenet5)``, or the estimator,
``ppt.PPTClassifier(module=lenet5)``. Each takes MNIST rows as images, shape (1, 28, 28),
and returns 10 logits (the cross-entropy of ppt_dask's classification loss takes logits).
"""

from torch import nn


def lenet5() -> nn.Module:
    """LeNet-5 (LeCun et al. 1998) as it is usually written today: ReLU and max pooling
    instead of scaled tanh and subsampling, a padded first convolution so that 28x28 images
    keep the paper's 32x32 geometry. 61,706 parameters; 0.42 million multiply-adds per image forward."""
    return nn.Sequential(
        nn.Conv2d(1, 6, kernel_size=5, padding=2), nn.ReLU(), nn.MaxPool2d(2),   # 6 x 14 x 14
        nn.Conv2d(6, 16, kernel_size=5), nn.ReLU(), nn.MaxPool2d(2),             # 16 x 5 x 5
        nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120), nn.ReLU(),
        nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, 10),
    )


def lenet5_dropout() -> nn.Module:
    """:func:`lenet5` with dropout before its last two layers: a random forward pass (ppt_dask
    seeds each pass's draws, so runs stay reproducible)."""
    body = list(lenet5())
    return nn.Sequential(*body[:-3], nn.Dropout(0.25), *body[-3:-1], nn.Dropout(0.25), body[-1])


def tiny_cnn() -> nn.Module:
    """A small convolutional network (2,594 parameters) for quick runs and tests."""
    return nn.Sequential(
        nn.Conv2d(1, 4, kernel_size=5, stride=2), nn.ReLU(),   # 4 x 12 x 12
        nn.MaxPool2d(2),                                      # 4 x 6 x 6
        nn.Flatten(),
        nn.Linear(4 * 6 * 6, 16), nn.ReLU(),
        nn.Linear(16, 10),
    )
