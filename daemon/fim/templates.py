"""FIM prompt templates and stop strings of each model family, byte for byte.

A raw-prompt server (vLLM, llama.cpp ``/completion``, Ollama ``raw``) knows nothing about
prefix and suffix: the client writes the model's special tokens itself. Each family has its own
tokens, order (PSM: prefix first; SPM: suffix first) and stop strings; a wrong byte (an ASCII
``|`` instead of DeepSeek's U+FF5C, a missing space around CodeLlama's ``<SUF>``) silently
degrades the answer, so every template here is pinned by a test.

Sources per family (model cards, the models' tokenizer files, and the published templates
of llama.cpp, Continue and Tabby) and the summary table are in docs/fim.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

__all__ = [
    "ALL_SPECIAL_TOKENS",
    "GENERIC_TOKENS",
    "TEMPLATES",
    "FimTemplate",
    "detect_template",
    "get_template",
    "resolve_template",
    "template_from_tokens",
]

ContextStyle = Literal[
    "none", "starcoder", "qwen-auto", "qwen-repo", "deepseek", "codestral", "codegeex"
]
"""How a template carries other files (``extra``), the file name and the repository name."""

# DeepSeek's tokens are written with FULLWIDTH VERTICAL LINE (U+FF5C) and
# LOWER ONE EIGHTH BLOCK (U+2581); spelled out so no editor "fixes" them.
_BAR = "\uff5c"
_SP = "\u2581"
_DS_BEGIN = f"<{_BAR}fim{_SP}begin{_BAR}>"
_DS_HOLE = f"<{_BAR}fim{_SP}hole{_BAR}>"
_DS_END = f"<{_BAR}fim{_SP}end{_BAR}>"
_DS_EOS = f"<{_BAR}end{_SP}of{_SP}sentence{_BAR}>"


@dataclass(frozen=True)
class FimTemplate:
    """One model family's FIM prompt format.

    PSM renders ``before + prefix_token + P + suffix_token + S + middle_token``;
    SPM renders ``before + suffix_token + S + prefix_token + P + middle_token``.
    ``before`` is the BOS or chat header plus, for families trained on it, other files.
    """

    name: str
    stop: tuple[str, ...]
    spm: bool = False
    prefix_token: str = ""
    suffix_token: str = ""
    middle_token: str = ""
    context: ContextStyle = "none"
    description: str = ""
    context_stop: tuple[str, ...] = ()
    """Extra stop strings when other files are rendered into the prompt."""

    def stops(self, *, extra: Sequence[tuple[str, str]] = ()) -> tuple[str, ...]:
        """The stop strings for a prompt rendered with these other files."""
        return (*self.stop, *self.context_stop) if extra else self.stop

    def render(
        self,
        prefix: str,
        suffix: str,
        *,
        extra: Sequence[tuple[str, str]] = (),
        filename: str = "",
        repo: str = "",
        language: str = "",
    ) -> str:
        """The raw prompt for this hole; ``extra`` holds other files as (path, text)."""
        before, prefix = self._with_context(prefix, extra, filename, repo, language)
        if self.spm:
            body = f"{self.suffix_token}{suffix}{self.prefix_token}{prefix}{self.middle_token}"
        else:
            body = f"{self.prefix_token}{prefix}{self.suffix_token}{suffix}{self.middle_token}"
        return f"{before}{body}"

    def _with_context(
        self,
        prefix: str,
        extra: Sequence[tuple[str, str]],
        filename: str,
        repo: str,
        language: str,
    ) -> tuple[str, str]:
        """Text to put before the FIM tokens, and the prefix (Codestral puts files in it)."""
        style = self.context
        if style == "qwen-repo" or (style == "qwen-auto" and (extra or filename or repo)):
            files = "".join(f"<|file_sep|>{path}\n{text}\n" for path, text in extra)
            return f"<|repo_name|>{repo}\n{files}<|file_sep|>{filename}\n", prefix
        if style == "starcoder" and extra:
            files = "".join(f"<file_sep>{path}\n{text}" for path, text in extra)
            return f"{files}<file_sep>{filename}\n", prefix
        if style == "deepseek" and extra:
            files = "\n".join(f"#{path}\n{text}" for path, text in extra)
            return f"{files}\n#{filename}\n", prefix
        if style == "codestral" and extra:
            files = "".join(f"+++++ {path}\n{text}\n" for path, text in extra)
            return "", f"{files}+++++ {filename}\n{prefix}"
        if style == "codegeex":
            refs = "".join(f"###REFERENCE:\n###PATH:{path}\n{text}\n" for path, text in extra)
            head = f"###PATH:{filename}\n###LANGUAGE:{language}\n###MODE:BLOCK\n"
            return f"<|user|>\n{refs}{head}", prefix
        return "", prefix


_QWEN_STOP = (
    "<|endoftext|>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<|im_start|>",
    "<|im_end|>",
)


_QWEN_TOKENS = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")
"""Qwen's FIM tokens; CodeGemma and Granite 4 spell theirs the same way."""
_STARCODER_TOKENS = ("<fim_prefix>", "<fim_suffix>", "<fim_middle>")
"""StarCoder's FIM tokens; Granite (code, 3.x) spells its the same way."""


def _psm(
    name: str,
    stop: tuple[str, ...],
    tokens: tuple[str, str, str],
    *,
    context: ContextStyle = "none",
    description: str,
) -> FimTemplate:
    """A prefix-first template from its (prefix, suffix, middle) tokens."""
    prefix, suffix, middle = tokens
    return FimTemplate(
        name,
        stop,
        prefix_token=prefix,
        suffix_token=suffix,
        middle_token=middle,
        context=context,
        description=description,
    )


_ALL: tuple[FimTemplate, ...] = (
    _psm(
        "codellama",
        ("<PRE>", "<SUF>", "<MID>", "<EOT>"),
        ("<PRE> ", " <SUF>", " <MID>"),
        description="CodeLlama 7B/13B base or -code",
    ),
    _psm(
        "starcoder",
        (*_STARCODER_TOKENS, "<file_sep>", "<|endoftext|>"),
        _STARCODER_TOKENS,
        context="starcoder",
        description="StarCoder, StarCoderBase, StarCoder2, stable-code",
    ),
    _psm(
        "santacoder",
        ("<|endoftext|>", "<fim-prefix>", "<fim-suffix>", "<fim-middle>", "<fim-pad>"),
        ("<fim-prefix>", "<fim-suffix>", "<fim-middle>"),
        description="SantaCoder (revision fim); hyphenated tokens",
    ),
    _psm(
        "deepseek",
        (_DS_BEGIN, _DS_HOLE, _DS_END, _DS_EOS),
        (_DS_BEGIN, _DS_HOLE, _DS_END),
        context="deepseek",
        description="DeepSeek-Coder v1 and V2 / V2-Lite base",
    ),
    _psm(
        "qwen",
        _QWEN_STOP,
        _QWEN_TOKENS,
        context="qwen-auto",
        description="Qwen2.5-Coder / Qwen3-Coder, file level (repo level when files are given)",
    ),
    _psm(
        "qwen-repo",
        _QWEN_STOP,
        _QWEN_TOKENS,
        context="qwen-repo",
        description="Qwen2.5-Coder repository level",
    ),
    _psm(
        "codegemma",
        (*_QWEN_TOKENS, "<|file_separator|>", "<end_of_turn>", "<eos>"),
        _QWEN_TOKENS,
        description="CodeGemma 2B / 7B base",
    ),
    FimTemplate(
        "codestral",
        ("[PREFIX]", "[SUFFIX]"),
        spm=True,
        prefix_token="[PREFIX]",
        suffix_token="[SUFFIX]",
        context="codestral",
        context_stop=("\n+++++ ",),
        # The raw form starts with BOS (<s>); servers add it when tokenizing, so it is not
        # rendered (a literal "<s>" would be tokenized as text or doubled).
        description="Codestral 22B; suffix first",
    ),
    _psm(
        "granite",
        (*_STARCODER_TOKENS, "<|end_of_text|>"),
        _STARCODER_TOKENS,
        description="IBM Granite code, Granite 3.x",
    ),
    _psm(
        "granite4",
        ("<|end_of_text|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>"),
        _QWEN_TOKENS,
        description="IBM Granite 4",
    ),
    FimTemplate(
        "codegeex4",
        (
            "<|user|>",
            "<|code_suffix|>",
            "<|code_prefix|>",
            "<|code_middle|>",
            "<|assistant|>",
            "<|endoftext|>",
        ),
        spm=True,
        prefix_token="<|code_prefix|>",
        suffix_token="<|code_suffix|>",
        middle_token="<|code_middle|><|assistant|>\n",
        context="codegeex",
        description="CodeGeeX4; chat-wrapped, suffix first",
    ),
    _psm(
        "seed-coder",
        (
            f"<[end{_SP}of{_SP}sentence]>",
            "<[fim-prefix]>",
            "<[fim-middle]>",
            "<[fim-suffix]>",
            f"<[PAD{_SP}TOKEN]>",
            f"<[SEP{_SP}TOKEN]>",
            f"<[begin{_SP}of{_SP}sentence]>",
        ),
        ("<[fim-prefix]>", "<[fim-suffix]>", "<[fim-middle]>"),
        description="ByteDance Seed-Coder",
    ),
)

TEMPLATES: Mapping[str, FimTemplate] = MappingProxyType({t.name: t for t in _ALL})


def get_template(name: str) -> FimTemplate:
    """The template called ``name``; a ValueError lists the known names otherwise."""
    try:
        return TEMPLATES[name.strip().lower()]
    except KeyError:
        known = ", ".join(TEMPLATES)
        raise ValueError(f"unknown FIM template {name!r}; known templates: {known}") from None


def resolve_template(
    setting: str, *, model: str = "", tokens: Iterable[str] = ()
) -> FimTemplate | None:
    """The template a backend should use: the configured name, or for ``auto`` the one the
    server's special tokens reveal, else the one the model name suggests (None: unknown)."""
    if setting.strip().lower() != "auto":
        return get_template(setting)
    return template_from_tokens(tokens) or detect_template(model)


def detect_template(model: str) -> FimTemplate | None:
    """Guess the family from a model name (Ollama tag, HF id, GGUF file); None if unsure.

    Avoids the substring traps of name routing (fim-templates.md §3): a ``qwen`` without
    ``coder`` is a chat model, not StarCoder; a ``4`` only means Granite 4 right after
    ``granite``; instruct/chat checkpoints of families whose FIM lives only in the base
    model (DeepSeek-Coder, CodeGemma, Seed-Coder, StarCoder2) get None, as do CodeLlama's
    34B/70B and Python variants, which were not trained to infill.
    """
    name = model.strip().lower()
    name = name.rsplit("/", 1)[-1]  # "hf.co/org/Qwen2.5-Coder-1.5B-GGUF:Q8_0" -> the model
    family = _family(name)
    if family is None:
        return None
    if _INSTRUCT.search(name) and family in _BASE_ONLY_FIM:
        return None
    if family == "codellama" and (_CODELLAMA_NO_FIM.search(name)):
        return None
    return TEMPLATES[family]


_INSTRUCT = re.compile(r"(?:^|[-_:.\s])(?:instruct|it|chat|reasoning)(?=$|[-_:.\s])")
_BASE_ONLY_FIM = frozenset({"deepseek", "codegemma", "seed-coder", "starcoder"})
_CODELLAMA_NO_FIM = re.compile(r"(?:^|[-_:.])(?:34b|70b|python)(?=$|[-_:.])")


def _family(name: str) -> str | None:
    if "deepseek" in name and "coder" in name:
        return "deepseek"
    if "codeqwen" in name:
        return "starcoder"  # CodeQwen1.5 uses the StarCoder tokens, without pipes
    if "qwen" in name and "coder" in name:
        return "qwen"
    if re.search(r"code[-_]?llama", name):
        return "codellama"
    if "codestral" in name and "mamba" not in name:
        return "codestral"
    if "codegemma" in name:
        return "codegemma"
    if "santacoder" in name:
        return "santacoder"
    if "starcoder" in name or re.search(r"stable-?code", name):
        return "starcoder"
    if re.search(r"codegeex-?4", name):
        return "codegeex4"
    if re.search(r"seed-?coder", name):
        return "seed-coder"
    if "granite" in name:
        return _granite(name)
    return None


def _granite(name: str) -> str | None:
    # "granite4:tiny-h", "granite-4.0-h-micro" are Granite 4; "granite3.3:8b" and
    # "granite-code:8b" are not, and neither is a "4b" size elsewhere in the name.
    match = re.search(r"granite[-_]?(\d+)", name)
    if match is not None:
        return "granite4" if match.group(1) == "4" else "granite"
    return "granite" if re.search(r"granite[-_]code", name) else None


# The FIM-token spellings llama.cpp's vocab loader recognises (src/llama-vocab.cpp), by family.
_PREFIX_SPELLINGS: Mapping[str, str] = {
    "<|fim_prefix|>": "qwen",
    "<fim-prefix>": "santacoder",
    "<fim_prefix>": "starcoder",
    _DS_BEGIN: "deepseek",
    "<PRE>": "codellama",
    "\u2581<PRE>": "codellama",
    "<|code_prefix|>": "codegeex4",
    "[PREFIX]": "codestral",
    "<[fim-prefix]>": "seed-coder",
}


def template_from_tokens(tokens: Iterable[str]) -> FimTemplate | None:
    """The template matching the special tokens a server reports (e.g. its vocabulary)."""
    seen = set(tokens)
    for spelling, family in _PREFIX_SPELLINGS.items():
        if spelling in seen:
            return TEMPLATES[_refine(family, seen)]
    return None


def _refine(family: str, seen: set[str]) -> str:
    """Tell apart families that share a prefix token by their other tokens."""
    if family == "qwen":
        if "<|file_separator|>" in seen or "<end_of_turn>" in seen:
            return "codegemma"
        if "<|end_of_text|>" in seen and "<|endoftext|>" not in seen:
            return "granite4"
    if family == "starcoder" and "<|end_of_text|>" in seen and "<|endoftext|>" not in seen:
        return "granite"
    return family


# Spellings too common in ordinary text (HTML <s>/<PRE>, prose "[PREFIX]") to cut from every
# answer; they are cut only when they are the active template's own stop strings.
_GENERIC = frozenset({"<PRE>", "<SUF>", "<MID>", "<EOT>", "<eos>", "<s>", "[PREFIX]", "[SUFFIX]"})

# Leaks seen in the wild besides the templates' stops (fim-templates.md §1-§3).
_OTHER_LEAKS = (
    "<|cursor|>",
    "<|eot_id|>",
    "<|end|>",
    "<|fim_repo|>",
    "<fim_pad>",
    "<reponame>",
    "</fim_middle>",
    "<|file_separator|>",
    "<|code_middle|>",
)


def _special_tokens() -> tuple[str, ...]:
    found: set[str] = set(_OTHER_LEAKS)
    for template in _ALL:
        found.update(template.stop)
        found.update((template.prefix_token, template.suffix_token))
        found.update(template.middle_token.split("<|assistant|>"))
    found = {token.strip() for token in found} - _GENERIC - {""}
    return tuple(sorted(found, key=lambda token: (-len(token), token)))


ALL_SPECIAL_TOKENS: tuple[str, ...] = _special_tokens()
"""Distinctive FIM/EOS/file-separator tokens of every family, longest first.

A model may leak another family's token (a Qwen2 model fed Qwen1.5 tokens answers
``print(print()</fim_middle>``), so the cleaner cuts at any of these, not only the template's.
"""

GENERIC_TOKENS: tuple[str, ...] = tuple(sorted(_GENERIC, key=lambda token: (-len(token), token)))
"""Short sentinels that may be real text (``<s>`` is HTML); stops only for their own
family, or when the family is unknown."""
