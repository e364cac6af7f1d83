"""Suggestions as you type: when to ask (pure, on an injected clock), what to show, and the
accessibility events that say the user typed. Opt-in (``suggestions.auto``)."""
