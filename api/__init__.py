"""memsift's front doors: the CLI, the REST API, MCP and `memsift up`. Thin layers over `core` and `flows`."""
