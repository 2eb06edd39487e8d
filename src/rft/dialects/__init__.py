"""Config dialects: other projects' key names mapped onto rft's canonical (verl) keys, and nothing else.

`trinity.py`: Trinity-RFT's YAML. (The three component specs' inputs are mapped by `rft.components`, one table per
spec.) A mapped config is loaded and checked by the same code as a verl one (`rft.trainer.configure`).
"""
