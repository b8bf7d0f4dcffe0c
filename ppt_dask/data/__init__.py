"""The data sets: built-in problems, MNIST read (or fetched) from disk, and the checks of
a training set. numpy and the standard library only."""
