"""``gradsync report``: comparison tables and plots from run directories."""
