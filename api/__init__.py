"""memsift's front doors: the CLI (and, later, the REST API). Thin layers over `core` and `flows`."""
