"""The training algorithms as data: each strategy says what a worker's task computes and how
the head combines the results (numpy step functions, no dask), and the serial reference
runs the same rounds in one process."""
