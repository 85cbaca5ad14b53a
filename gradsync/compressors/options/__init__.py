"""Every compressor's options (torch-free: the command line checks them before importing
torch); the compressors themselves are the modules beside this package."""
