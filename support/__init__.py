"""What the tests and the benchmarks share that is not a test: local servers, the crash worker,
the headless browser, repository paths. Benchmarks import from here, never from `tests`."""
