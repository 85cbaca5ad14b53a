"""What each worker process does: build components from the resolved config, train, log."""
