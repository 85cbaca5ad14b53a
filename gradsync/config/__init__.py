"""Configuration: typed schemas, validation, error formatting and the one instantiate call site."""
