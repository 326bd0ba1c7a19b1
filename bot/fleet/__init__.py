"""Running several ``chathub serve`` processes on one database (docs/scale-out.md): the
Telegram receiver's election, and the refusals that keep a second process off a database
it must not share (SQLite; another bot's database)."""
