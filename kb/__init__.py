"""Knowledge: the fact vocabulary, catalogs (GPUs, strategies, sources) and facts loading."""
