"""Build hook: setuptools compiles the cffi out-of-line API module named here.

cffi builds it against the stable ABI (``*.abi3.so``), so the wheel is tagged
``cp311-abi3`` and installs on every CPython from 3.11 on.
"""

from setuptools import setup

setup(
    cffi_modules=["tay/_native/_build.py:ffibuilder"],
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
