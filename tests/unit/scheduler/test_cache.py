from __future__ import annotations

from anyfill.daemon.backends.base import FimPrompt, Plan
from anyfill.daemon.scheduler.cache import CompletionCache

PLAN = Plan(mode="native")


def test_exact_hit_and_miss_on_other_backend_or_suffix() -> None:
    cache = CompletionCache()
    prompt = FimPrompt(prefix="def add(a, b):\n    ", suffix="\n\nprint(add(1, 2))")
    cache.put("llama", prompt, "return a + b", PLAN)
    hit = cache.get("llama", prompt)
    assert hit is not None
    assert hit.text == "return a + b"
    assert hit.typed == 0
    assert cache.get("ollama", prompt) is None
    assert cache.get("llama", FimPrompt(prefix=prompt.prefix, suffix="\n")) is None
    assert (
        cache.get("llama", FimPrompt(prefix=prompt.prefix, suffix=prompt.suffix, max_tokens=9))
        is None
    )


def test_type_through_serves_the_rest_of_the_completion() -> None:
    cache = CompletionCache()
    prompt = FimPrompt(prefix="def add(a, b):\n    ", suffix="\n")
    cache.put("llama", prompt, "return a + b", PLAN)
    typed = FimPrompt(prefix=prompt.prefix + "retu", suffix="\n")
    hit = cache.get("llama", typed)
    assert hit is not None
    assert (hit.text, hit.typed) == ("rn a + b", 4)
    # The user typed something else: no reuse.
    assert cache.get("llama", FimPrompt(prefix=prompt.prefix + "rex", suffix="\n")) is None
    # Typed it all: nothing left to offer.
    done = FimPrompt(prefix=prompt.prefix + "return a + b", suffix="\n")
    assert cache.get("llama", done) is None


def test_only_the_text_near_the_caret_matters() -> None:
    cache = CompletionCache(prefix_chars=10)
    cache.put("b", FimPrompt(prefix="AAAAAAAAAAAAAAA0123456789", suffix=""), "xyz", PLAN)
    hit = cache.get("b", FimPrompt(prefix="BBBB0123456789", suffix=""))
    assert hit is not None
    assert hit.text == "xyz"


def test_least_recently_used_goes_first() -> None:
    cache = CompletionCache(max_entries=2)
    p = [FimPrompt(prefix=f"line {i}\n", suffix="") for i in range(3)]
    cache.put("b", p[0], "zero", PLAN)
    cache.put("b", p[1], "one", PLAN)
    assert cache.get("b", p[0]) is not None  # p[0] is now the most recent
    cache.put("b", p[2], "two", PLAN)
    assert len(cache) == 2
    assert cache.get("b", p[1]) is None
    assert cache.get("b", p[0]) is not None
    assert cache.get("b", p[2]) is not None


def test_empty_answers_are_not_cached() -> None:
    cache = CompletionCache()
    prompt = FimPrompt(prefix="x", suffix="")
    cache.put("b", prompt, "", PLAN)
    assert cache.get("b", prompt) is None


def test_interactive_exact_repeat_is_a_retry_but_a_prefetched_answer_is_served_once() -> None:
    cache = CompletionCache()
    asked = FimPrompt(prefix="a = ", suffix="")
    cache.put("b", asked, "1", PLAN)
    assert cache.get("b", asked, interactive=True) is None
    assert cache.get("b", asked) is not None  # prefetch and batch callers still reuse it
    ahead = FimPrompt(prefix="b = ", suffix="")
    cache.put("b", ahead, "2", PLAN, ahead=True)
    hit = cache.get("b", ahead, interactive=True)
    assert hit is not None
    assert hit.text == "2"
    assert cache.get("b", ahead, interactive=True) is None


def test_another_sample_is_neither_served_from_nor_kept_in_the_cache() -> None:
    """Alt+]'s other sample must reach the backend, and a later press gets the usual answer."""
    from dataclasses import replace

    cache = CompletionCache()
    usual = FimPrompt(prefix="def add(a, b):\n    return ", suffix="")
    cache.put("local", usual, "a + b", Plan("native"))
    sample = replace(usual, sample=1)
    assert cache.get("local", sample) is None
    cache.put("local", sample, "b + a", Plan("native"))
    hit = cache.get("local", usual)
    assert hit is not None
    assert hit.text == "a + b"
