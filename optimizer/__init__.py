"""The planner: enumerate -> evaluate (analytical screen) -> verify (simulator) -> select (ILP) -> report.

Each stage is a plain function with typed inputs and outputs; the CLI strings them together.
"""
