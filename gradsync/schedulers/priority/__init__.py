"""Priority schedulers: partitions all-reduced input side first under a credit (bytescheduler,
usbyte)."""
