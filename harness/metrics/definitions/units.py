"""The clock's units, shared by every metric's formula: ``perf_counter_ns`` stamps → ms and s."""

NS_PER_MS = 1_000_000

NS_PER_S = 1_000_000_000
