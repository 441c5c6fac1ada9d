"""The package's version: here, below every layer, so the server and the dashboard read it
without importing the package root (which is the SDK's public face)."""

__version__ = "0.1.0"
