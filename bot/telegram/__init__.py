"""The Telegram adapter: a framework-neutral core and two thin bindings (DESIGN §6)."""
