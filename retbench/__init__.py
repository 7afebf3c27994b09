"""retbench: which embedding setup retrieves the right documents on your data, at what latency and
cost, and what the approximate index loses."""
