"""A source's turns: its live state and inbox, accepting a message durably, the consumer that runs one turn at a time, the bridge its events leave by, failed turns, recovery at start."""
