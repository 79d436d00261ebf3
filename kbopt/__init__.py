"""kbopt: explained, rule-based advice on LLM inference optimizations."""

__version__ = "0.1.0"
