"""The distribution's version, in a module of its own so a build can read it without imports."""

__version__ = "0.1.0"
