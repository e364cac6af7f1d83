"""A tooltip for every option of the panel, in words a user knows.

Keyed by the option's place in the file without list positions (``backends.url``,
``insert.apps.mode``), so one text serves every backend or rule. A row given its own tip
keeps it; a test checks that no row of any page is left without one.
"""

from __future__ import annotations

TIPS: dict[str, str] = {
    # Backends
    "backends.name": "How the routing, the tray menu and the command line call this backend",
    "backends.type": "Which kind of server or service this is: it decides how anyfill asks "
    "it. 'llama.cpp run by anyfill' needs no server of your own: anyfill starts one",
    "backends.url": "The server's web address, e.g. http://127.0.0.1:8080 for one on this computer",
    "backends.model": "The model the server should use; empty: whatever the server loaded",
    "backends.template": "How the text before and after the caret is written for this model "
    "family; 'auto' reads it from the model's name",
    "backends.key_env": "An environment variable holding the API key, used when the keyring "
    "holds none for this backend",
    "backends.server.binary": "The llama-server program to run; empty: found on PATH, else "
    "anyfill's own build or the prebuilt runtime",
    "backends.server.start": "Start the server with anyfill, unless a backend before it in "
    "the chain answers (ready at the first press), or only when a completion first needs it",
    "backends.server.context_size": "How much text (in tokens) the server holds at once: more "
    "reads further around the caret but needs more memory",
    "backends.server.threads": "Processor threads the server uses; 0 lets it choose",
    "backends.server.gpu_layers": "How many model layers go to the graphics card; -1: the "
    "server's default, 0: none",
    "backends.server.start_timeout_s": "How long loading the model may take before anyfill "
    "gives up on this start",
    "backends.max_tokens": "The longest answer, in tokens (about ¾ of a word each)",
    "backends.temperature": "0 gives the most likely answer every time; higher values vary more",
    "backends.timeouts.connect_s": "How long to wait for the server to accept the connection",
    "backends.timeouts.first_token_s": "How long to wait for the first piece of the answer",
    "backends.timeouts.total_s": "How long the whole answer may take",
    "backends.limits.requests_per_minute": "Never ask this backend more often than this "
    "(0: no limit); protects a paid plan's quota",
    "backends.limits.tokens_per_minute": "Never send more tokens than this per minute "
    "(0: no limit)",
    "backends.limits.max_concurrent": "How many requests may run at this backend at once",
    "backends.price.input_per_mtok": "What a million tokens sent cost, to show the spending",
    "backends.price.output_per_mtok": "What a million tokens received cost, to show the spending",
    # Routing
    "routing.default": "The backends a completion asks, in this order",
    "routing.fallback": "When a backend is down, too slow or over its limit, ask the next one "
    "in the chain instead of giving up",
    "routing.hedge_after_ms": "When the first backend has sent nothing after this long, start "
    "the next one too; the first to answer wins (0: off)",
    # Hotkeys and the popup
    "hotkeys.complete": "Complete at the caret and insert the answer at once",
    "hotkeys.preview": "Complete at the caret and show the answer in a popup first",
    "hotkeys.cancel": "Stop the completion that is running",
    "hotkeys.modifier_release_timeout_ms": "anyfill waits until you let go of the hotkey's "
    "keys before it touches the application; it gives up after this long",
    "ui.preview_accept_keys": "Keys that insert the previewed answer; they reach the "
    "application as usual when no preview shows",
    "ui.preview_dismiss_key": "Closes the preview without inserting anything",
    "ui.preview_next_key": "Shows another answer: another sample from the same backend, or "
    "the next backend's",
    "ui.preview_previous_key": "Goes back to the answer shown before",
    "ui.preview_font_size": "Text size in the preview popup",
    "ui.notifications": "Desktop notifications when something needs fixing",
    # Capture
    "capture.strategies": "How anyfill reads the text around the caret, tried in this order "
    "until one works",
    "capture.scope": "How far the keyboard method selects: to the document's start and end "
    "(more context) or only the current line (faster in big documents)",
    "capture.max_prefix_chars": "At most this much text before the caret is read",
    "capture.max_suffix_chars": "At most this much text after the caret is read",
    "capture.copy_timeout_ms": "How long to wait for the application to copy the selected text "
    "before trying the next method",
    "capture.empty_timeout_ms": "When the caret is at the very start or end, nothing gets "
    "selected and the application copies nothing: after this long anyfill takes that as empty "
    "text. Each application's own speed is learned after a few presses",
    "capture.cursor_marker": "In clipboard mode: the text you put where the caret is, so "
    "anyfill knows where to complete",
    # Insert
    "insert.mode": "Paste the answer (fast, the clipboard is put back), type it key by key, or "
    "show it in a preview first",
    "insert.type_max_chars": "Short plain answers up to this length are typed instead of "
    "pasted (0: always paste)",
    "insert.restore_clipboard": "After pasting, put back what your clipboard held before",
    "insert.paste_keys": "The keys that paste in most applications",
    "insert.copy_keys": "The keys that copy in most applications",
    "insert.restore_timeout_ms": "Your clipboard is put back once the application has read the "
    "answer, at the latest after this long",
    # Per application
    "insert.apps.match": "Which windows this rule is for: a regular expression searched in "
    "the window's class (use 'Pick a window' to fill it in)",
    "insert.apps.title": "Also (or instead) match the window's title, e.g. (?i)password",
    "insert.apps.disabled": "anyfill does nothing in these windows (password managers, banking)",
    "insert.apps.mode": "How the answer goes in here; '(the global setting)' uses Capture "
    "and insert's choice",
    "insert.apps.paste_keys": "The keys that paste in these windows (terminals use "
    "Ctrl+Shift+V); Backspace while recording: the global keys",
    "insert.apps.copy_keys": "The keys that copy in these windows (terminals use "
    "Ctrl+Shift+C); Backspace while recording: the global keys",
    "insert.apps.capture": "How the text is read here; none ticked: the global methods",
    "insert.apps.suggest": "Suggestions as you type in these windows: on, off, or the "
    "Suggestions page's choice",
    "suggestions.auto": "Show a dimmed suggestion at the caret when you pause while typing; "
    "Tab takes it, Esc or typing on ignores it. Off: only the hotkeys ask",
    "suggestions.ghost_lines": "How many lines of a longer suggestion show at the caret; Tab "
    "still inserts all of it",
    "insert.apps.backends": "Which backends answer here; none ticked: the default chain",
    # Suggestions as you type
    "suggestions.style": "Dimmed text at the caret, or the preview popup; also for the "
    "preview hotkey. Where no caret position is known the popup shows",
    "suggestions.pause_ms": "How long you pause before anyfill asks; 0 adapts it to your "
    "typing rhythm and the backend's speed (100-1000 ms)",
    "suggestions.backends": "The backends asked while you type; none ticked: the default chain",
    "suggestions.cloud_auto": "Off: only backends on this computer are asked while you type; "
    "a paid cloud service is asked only when you press a hotkey",
    "suggestions.max_chars_after_caret": "With more text than this after the caret on its "
    "line you are editing, not writing on: no suggestion",
    # Completion
    "completion.single_line": "Ask for one line only: 'auto' does when text follows the caret "
    "on its line, so the answer does not run over it",
    "completion.max_prefix_chars": "At most this much text before the caret is sent to the backend",
    "completion.max_suffix_chars": "At most this much text after the caret is sent to the backend",
    # Privacy, advanced
    "privacy.log_text": "Off: the log shows only lengths, never your text or the answers",
    "privacy.mqtt_text": "Off: MQTT events carry no captured text, only what happened",
    "logging.level": "How much the log says; Debug is for reporting a problem",
    "logging.file": "Keep a log file (rotated, so it never grows without bound)",
    # Context beyond the caret (docs/context.md)
    "context.enabled": "Off: only the text around the caret is sent, nothing related to it",
    "context.title": "Name the application and window title to the backend (never a "
    "terminal's title: it shows commands and hosts)",
    "context.fields": "Send the window's other text fields (a mail's subject, a form's lines); "
    "password fields never",
    "context.accepted": "Send completions you accepted in the same application, so answers "
    "match how you write there",
    "context.clipboard": "Send what you copied recently; off unless you turn it on, and never "
    "a single word or a password manager's copy",
    "context.max_chars": "At most this much related text per request; the text around the "
    "caret keeps its own limits",
    "context.max_chunks": "How many pieces of related text are kept, newest first",
    "context.chunk_lines": "How many lines one piece of related text keeps at most",
    "context.terminals": "Programs whose window title is never sent, written as their window "
    "class or process name",
    "context.password_managers": "Programs that never get or give related text, written as "
    "their window class or process name",
}


def tip_for(prefix: str, key: tuple[str, ...]) -> str:
    return TIPS.get(".".join((prefix, *key)) if prefix else ".".join(key), "")
