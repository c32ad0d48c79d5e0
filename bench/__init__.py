"""Threadline benchmarks: `python bench/run.py [--smoke] [--database-url URL]`. They print figures;
they never assert speed."""
