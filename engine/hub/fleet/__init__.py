"""The fleet's placement (``FleetWork``): source leases and membership, and the events relayed between processes."""
