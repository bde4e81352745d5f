"""Sources: where the files an index holds come from."""
