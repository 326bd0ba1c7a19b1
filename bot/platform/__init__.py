"""What every chat front end shares, whatever its transport: commands (more to come)."""
