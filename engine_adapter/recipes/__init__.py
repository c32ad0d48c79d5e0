"""Recipes as text: parsing and validation, expressions, placeholders and shell quoting, cron,
payload schemas, webhook and notify specs. No database.
"""

__all__ = [
    "cron",
    "expressions",
    "notify_spec",
    "payload_schema",
    "recipe_doc",
    "recipe_text",
    "recipes",
    "render",
    "shell_commands",
    "shell_context",
    "webhook_spec",
]
