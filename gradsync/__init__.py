"""gradsync: a declarative runner for communication-efficient data-parallel training."""

__version__ = "0.1.0"
