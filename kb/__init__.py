"""Knowledge: the fact vocabulary, catalogs (GPUs, strategies, seed claims) and facts loading."""
