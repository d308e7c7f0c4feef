"""The command-line layer: argument parsing, Hydra composition, commands and their output.

Top of the house: it may import every other layer; nothing else imports it
(tests/test_layering.py).
"""

from llmplan.cli.main import main

__all__ = ["main"]
