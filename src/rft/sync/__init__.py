"""Synchronizers: weights from the trainer to the explorer (memory, checkpoint, process group) and when."""
