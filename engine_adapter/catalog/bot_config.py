"""Agent bots' settings: validating a bot file, storing it, and the snapshot a run keeps.

A bot file maps bot names to settings:

    helper:
      base_url: http://127.0.0.1:8080/v1
      model: qwen2.5-7b-instruct
      api_key: env:OPENAI_API_KEY   # the variable's name; a key is never stored
      temperature: 0
      max_tokens: 1024
      max_turns: 20

Problems are reported like a recipe's: "<path>: <problem>" (RecipeError).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg

from engine_adapter.access.authorization import Action, transaction
from engine_adapter.model.identity import Actor
from engine_adapter.model.recipe_values import RecipeError, quote
from engine_adapter.recipes import recipe_doc
from engine_adapter.store import db

BOT_NAME = re.compile(r"[a-z0-9_-]{1,64}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
DEFAULT_MAX_TURNS = 20
MAX_TURNS = 1000
MAX_TOKENS = 1_000_000
_KEYS = (
    "base_url",
    "model",
    "api_key",
    "temperature",
    "max_tokens",
    "max_turns",
    "max_tokens_per_run",
)
MAX_RUN_TOKENS = 1_000_000_000


@dataclass(frozen=True)
class BotConfig:
    """A bot's settings; a run keeps them as its spawn found them (threadline.agent_snapshot,
    migration 032, writes these fields), and takes them again when it is retried."""

    name: str
    base_url: str
    model: str
    temperature: float = 0.0
    max_tokens: int | None = None
    api_key_env: str | None = None
    max_turns: int = DEFAULT_MAX_TURNS
    max_tokens_per_run: int | None = None  # a run's budget, over all its agent steps
    # Its model's price when the run was spawned (threadline.model_prices), USD per million
    # tokens in and out; None: not priced, and no cost is made up.
    price_in: float | None = None
    price_out: float | None = None

    def cost_usd(self, tokens_in: int, tokens_out: int) -> float | None:
        if self.price_in is None or self.price_out is None:
            return None
        return round((tokens_in * self.price_in + tokens_out * self.price_out) / 1e6, 8)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BotConfig:
        """From a run's snapshot or a row of threadline.bots."""
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def settings_change(
    bot: str, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> str | None:
    """What changed in a run's bot settings since it took them, as one sentence for its thread
    (None: nothing). A retry takes the settings in force now, so `threadline bot apply` after a
    failure is the fix its message promises."""
    if before == after:
        return None
    if after is None:
        return f"bot {bot!r} has no agent settings any more (its command backend runs the step)"
    if before is None:
        return f"bot {bot!r} is now an agent bot (model {after['model']} at {after['base_url']})"
    changed = [
        f"{key} {quote(before.get(key))} → {quote(after.get(key))}"
        for key in BotConfig.__dataclass_fields__
        if before.get(key) != after.get(key)
    ]
    return f"bot {bot!r} changed {'; '.join(changed)}"


def _int(value: Any, path: str, low: int, high: int, errors: list[str]) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        errors.append(f"{path}: {quote(value)} must be an integer from {low} to {high}")
        return None
    return value


def _parse_bot(name: Any, d: Any, errors: list[str]) -> BotConfig | None:
    n_before = len(errors)
    path = str(name)
    if not isinstance(name, str) or not BOT_NAME.fullmatch(name):
        errors.append(f"{path}: bot name {quote(name)} must match [a-z0-9_-]{{1,64}}")
        return None
    if not isinstance(d, dict):
        errors.append(f"{path}: must be a mapping of settings, got {quote(d)}")
        return None
    for key in d:
        if key not in _KEYS:
            errors.append(f"{path}.{key}: unknown field (known: {', '.join(_KEYS)})")
    for key in ("base_url", "model"):
        value = d.get(key)
        if not isinstance(value, str) or not value.strip():
            errors.append(f"{path}.{key}: required, a non-empty string")
    base_url = d.get("base_url")
    if isinstance(base_url, str) and not re.match(r"https?://\S+$", base_url.strip()):
        errors.append(f"{path}.base_url: {quote(base_url)} must be an http(s) URL")
    api_key_env = None
    api_key = d.get("api_key")
    if api_key is not None:
        m = re.fullmatch(r"env:(.+)", api_key) if isinstance(api_key, str) else None
        if m is None or not ENV_NAME.fullmatch(m.group(1)):
            # Never echo the value: it may be the key itself.
            errors.append(
                f"{path}.api_key: must be env:NAME, the environment variable that holds the key "
                "in the bot process (a key is never stored)"
            )
        else:
            api_key_env = m.group(1)
    temperature = d.get("temperature", 0)
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not math.isfinite(temperature)
        or not 0 <= temperature <= 2
    ):
        errors.append(f"{path}.temperature: {quote(temperature)} must be a number from 0 to 2")
    max_tokens = d.get("max_tokens")
    if max_tokens is not None:
        max_tokens = _int(max_tokens, f"{path}.max_tokens", 1, MAX_TOKENS, errors)
    max_turns = _int(
        d.get("max_turns", DEFAULT_MAX_TURNS), f"{path}.max_turns", 1, MAX_TURNS, errors
    )
    budget = d.get("max_tokens_per_run")
    if budget is not None:
        budget = _int(budget, f"{path}.max_tokens_per_run", 1, MAX_RUN_TOKENS, errors)
    if len(errors) > n_before:
        return None
    assert isinstance(base_url, str)  # else an error was said above
    return BotConfig(
        name=name,
        base_url=base_url.strip(),
        model=d["model"].strip(),
        temperature=float(temperature),
        max_tokens=max_tokens,
        api_key_env=api_key_env,
        max_turns=max_turns or DEFAULT_MAX_TURNS,
        max_tokens_per_run=budget,
    )


def parse_bots(doc: Any, source: str = "<bots>") -> list[BotConfig]:
    """Every bot of a parsed bot file; RecipeError listing every problem."""
    errors = [f"{source}: {p}" for p in recipe_doc.check_document(doc)] if doc else []
    if not isinstance(doc, dict) or not doc:
        raise RecipeError(errors or [f"{source}: must map bot names to their settings"], source)
    bots = [b for name, d in doc.items() if (b := _parse_bot(name, d, errors)) is not None]
    if errors:
        raise RecipeError(errors, source)
    return bots


def load_bots_file(path: Path) -> list[BotConfig]:
    try:
        doc = recipe_doc.parse_text(path.read_text())
    except recipe_doc.DocumentError as err:
        raise RecipeError([f"{path.name}: {err}"], str(path)) from None
    return parse_bots(doc, path.name)


def apply_bots(
    conn: psycopg.Connection[Any], bots: list[BotConfig], actor: Actor | None = None
) -> None:
    """Create or replace each bot's settings; runs already spawned keep their snapshot until
    they are retried. A
    person's door passes its actor (the authorization layer decides and audits)."""
    target = dict(detail={"bots": [bot.name for bot in bots]})
    with transaction(conn, actor, Action.CONFIGURE_BOTS, **target):
        for bot in bots:
            conn.execute(db.q("upsert_bot"), bot.to_dict())


def list_bots(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return db.fetch_all(conn, "list_bots")


MAX_PRICE = 10_000.0  # USD per million tokens: far above any model's, below a typo's


def set_price(
    conn: psycopg.Connection[Any],
    model: str,
    input_usd: float,
    output_usd: float,
    actor: Actor | None = None,
) -> None:
    """A model's price, USD per million tokens in and out; runs spawned from now on keep it."""
    if not model.strip() or len(model) > 200:
        raise RecipeError([f"model: {quote(model)} must be 1 to 200 characters"])
    for name, value in (("--input", input_usd), ("--output", output_usd)):
        if not math.isfinite(value) or not 0 <= value <= MAX_PRICE:
            raise RecipeError(
                [f"{name}: {value} must be USD per million tokens, from 0 to {MAX_PRICE:g}"]
            )
    price = dict(model=model, input=input_usd, output=output_usd)
    with transaction(conn, actor, Action.SET_PRICE, detail=price):
        conn.execute(db.q("set_model_price"), price)


def list_prices(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return db.fetch_all(conn, "list_model_prices")


def remove_price(conn: psycopg.Connection[Any], model: str, actor: Actor | None = None) -> bool:
    """Remove a model's price; False if it had none."""
    with transaction(conn, actor, Action.SET_PRICE, detail={"model": model, "removed": True}):
        return db.fetch_one(conn, "remove_model_price", dict(model=model)) is not None
