"""anyfill's headless asyncio core. Never imports Qt (see tests/unit/foundation/test_boundaries.py)."""
