"""Migration layers that exist only for the tests of the mechanism."""
