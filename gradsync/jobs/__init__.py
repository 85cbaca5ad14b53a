"""A command's jobs: composed from the families' options (``gradsync/families.py``), checked
before anything runs, and described (``--help``, the configuration reference)."""
