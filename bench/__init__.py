"""The benchmarks: one module per claim, run from the repository root as ``python -m bench.<name>`` (``make bench``
runs them all through ``bench.run_all``); ``bench.summary`` writes the README's and the docs' tables from
``bench/results``. Fixtures of their own (``demo_model``, ``train_session``, ``batching_policies``): nothing here
imports the tests."""
