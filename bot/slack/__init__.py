"""Slack: the agent in DMs, channels and threads through slack-bolt (docs/slack.md)."""
