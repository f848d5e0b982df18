"""The gutenberg data set's tests: its contract (test_contract.py), then its own pieces."""
