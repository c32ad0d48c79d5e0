"""The webhook ingress: signed requests in, runs out, through checked database functions only."""

__all__ = [
    "hook_requests",
    "hooks",
    "webhook_auth",
]
