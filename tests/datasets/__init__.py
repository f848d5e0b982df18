"""Each data set's tests, in a folder of its own (``tests/datasets/NAME/``), its contract first."""
