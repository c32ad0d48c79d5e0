"""Who is calling and what they may do: accounts, API tokens, and the one authorization layer every
door asks.
"""

__all__ = [
    "accounts",
    "api_tokens",
    "authorization",
]
