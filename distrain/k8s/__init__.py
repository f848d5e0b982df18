"""Running training on Kubernetes through existing engines: the MPI Operator and plain Jobs."""
