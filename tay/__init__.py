"""tay: a durable, single-node background-job engine with a C core.

The package also carries the Python SDK with the public API of ``tay-client`` 1.4.0.
"""

__version__ = "0.1.0"
