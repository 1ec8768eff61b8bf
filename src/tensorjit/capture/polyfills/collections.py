"""collections ' C types as symbolic containers (filled in by the collections family)."""
