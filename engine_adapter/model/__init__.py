"""The vocabulary every part shares: states, step kinds, names of events and keys, who is acting,
settings. Pure Python; imports nothing else of Threadline.
"""

__all__ = [
    "domain",
    "errors",
    "identity",
    "logs",
    "names",
    "recipe_values",
    "settings",
    "vocab",
]
