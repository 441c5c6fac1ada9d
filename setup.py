"""Build hook: setuptools compiles the cffi out-of-line API module named here."""

from setuptools import setup

setup(cffi_modules=["tay/_native/_build.py:ffibuilder"])
