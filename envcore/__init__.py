"""The A01 repair gym: an environment core for repairing Broken Access Control in FastAPI apps."""

__version__ = "0.1.0"
