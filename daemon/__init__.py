"""anyfill's headless asyncio core.

Never imports Qt: tests/unit/foundation/test_boundaries.py and lint-imports check it.
"""
