"""Starting worker processes. This package knows nothing of training: it runs a command once per
rank, with rank/world-size environment, and reports which rank failed and why."""
