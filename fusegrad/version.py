"""The package version, in a module of its own so that codegen (whose cache key includes it)
can read it without importing the package root. fusegrad/__init__.py re-exports it."""

__version__ = "0.1.0"
