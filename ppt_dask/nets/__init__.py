"""Networks beyond core's numpy MLP that need another library: :class:`TorchNet` (a PyTorch
module as a network of the model protocol, :mod:`ppt_dask.core.model`). This folder is the
only part of ppt_dask that imports torch, and only when a TorchNet is made or read."""
