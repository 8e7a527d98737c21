"""The flashbuild release: a leaf module (it imports nothing), so that any stage can read the version
without importing the package root (which imports the stages it drives: a cycle)."""

__version__ = "0.1.0"
