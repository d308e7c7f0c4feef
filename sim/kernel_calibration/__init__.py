"""The runtime kernel model fitted to measurements: load a calibration file, evaluate it,
choose the tier (measured, sibling, cross-gen, spec).

This is the simulator's side of calibration. The offline tools that *fit* and *validate*
the file (``llmplan.calibration``) import this package; it never imports them.
"""
