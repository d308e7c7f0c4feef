"""llmplan: the cheapest GPU deployment that meets LLM serving latency targets."""

__version__ = "0.1.0"
