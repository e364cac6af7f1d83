"""anyfill's headless asyncio core. Never imports Qt (see tests/unit/test_boundaries.py)."""
