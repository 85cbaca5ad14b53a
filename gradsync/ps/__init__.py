"""Parameter servers: processes besides the workers that hold the global model, take the
workers' gradients and hand back parameters (``scheduler=ps_bsp``, ``asp``, ``ssp``)."""
