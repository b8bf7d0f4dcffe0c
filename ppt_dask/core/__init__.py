"""The numpy core: the network, its activations and losses, the optimizers, the reduction
tree, the stopping rule and the argument checks. Imports nothing but numpy."""
