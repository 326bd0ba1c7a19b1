"""The turn: its loop of model rounds, the gate and the dispatch of tool calls, sub-agents, cancellation, resuming a cut turn, and how it ends (recorded, concluded, emitted)."""
