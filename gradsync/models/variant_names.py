"""The image-model variants, torch-free so that config schemas can validate against them."""

VARIANTS = ("auto", "cifar", "imagenet")
CIFAR_MAX_HEIGHT = 64
"""``variant=auto`` picks the CIFAR variant for inputs at most this many pixels high."""
