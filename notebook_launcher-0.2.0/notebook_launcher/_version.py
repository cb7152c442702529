"""The package's version, in one place: pyproject.toml reads it from here (setuptools' `attr`,
without importing torch), `notebook_launcher.__version__` and `notebook-launcher --version` show it."""

__version__ = "0.2.0"
