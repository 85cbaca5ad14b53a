"""Schedulers (``scheduler=`` option): when and how gradients are exchanged, and the update.

One package per family, one registry entry per option (``registry.py``); ``engine/`` holds what
they share."""
