"""``scheduler=allreduce``: one exchange of the flattened gradient after backward."""
