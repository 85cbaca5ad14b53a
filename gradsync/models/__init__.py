"""Models (``model=`` option). Constructors take a DataSpec at build time."""
