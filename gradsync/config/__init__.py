"""What every job's configuration builds on: the declared checks of options (``checks.py``),
the trainer's and root schemas, the files a command is given, and the one instantiate call
site. It imports nothing of the rest of gradsync."""
