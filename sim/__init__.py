"""The embedded simulator: kernel and step cost models and the discrete-event serving engine.

Layering: ``sim`` imports ``hardware_catalog`` and ``model_catalog``; it never imports
``optimizer`` or ``llmplan`` (checked by tests/test_layering.py).
"""
