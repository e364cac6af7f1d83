"""Every template pinned byte for byte, and how a family is chosen from names and tokens."""

from __future__ import annotations

import pytest

from anyfill.daemon.fim.templates import (
    ALL_SPECIAL_TOKENS,
    TEMPLATES,
    detect_template,
    get_template,
    resolve_template,
    template_from_tokens,
)

P = "def f(x):\n    return "
S = " + 1\n"

# Written out independently of the module, from fim-templates.md §1.
EXPECTED = {
    "codellama": "<PRE> " + P + " <SUF>" + S + " <MID>",
    "starcoder": "<fim_prefix>" + P + "<fim_suffix>" + S + "<fim_middle>",
    "santacoder": "<fim-prefix>" + P + "<fim-suffix>" + S + "<fim-middle>",
    "deepseek": "<\uff5cfim\u2581begin\uff5c>"
    + P
    + "<\uff5cfim\u2581hole\uff5c>"
    + S
    + "<\uff5cfim\u2581end\uff5c>",
    "qwen": "<|fim_prefix|>" + P + "<|fim_suffix|>" + S + "<|fim_middle|>",
    "qwen-repo": "<|repo_name|>\n<|file_sep|>\n<|fim_prefix|>"
    + P
    + "<|fim_suffix|>"
    + S
    + "<|fim_middle|>",
    "codegemma": "<|fim_prefix|>" + P + "<|fim_suffix|>" + S + "<|fim_middle|>",
    "codestral": "[SUFFIX]" + S + "[PREFIX]" + P,
    "granite": "<fim_prefix>" + P + "<fim_suffix>" + S + "<fim_middle>",
    "granite4": "<|fim_prefix|>" + P + "<|fim_suffix|>" + S + "<|fim_middle|>",
    "codegeex4": "<|user|>\n###PATH:\n###LANGUAGE:\n###MODE:BLOCK\n<|code_suffix|>"
    + S
    + "<|code_prefix|>"
    + P
    + "<|code_middle|><|assistant|>\n",
    "seed-coder": "<[fim-prefix]>" + P + "<[fim-suffix]>" + S + "<[fim-middle]>",
}

EXPECTED_STOPS = {
    "codellama": ("<PRE>", "<SUF>", "<MID>", "<EOT>"),
    "starcoder": ("<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<file_sep>", "<|endoftext|>"),
    "santacoder": ("<|endoftext|>", "<fim-prefix>", "<fim-suffix>", "<fim-middle>", "<fim-pad>"),
    "deepseek": (
        "<\uff5cfim\u2581begin\uff5c>",
        "<\uff5cfim\u2581hole\uff5c>",
        "<\uff5cfim\u2581end\uff5c>",
        "<\uff5cend\u2581of\u2581sentence\uff5c>",
    ),
    "qwen": (
        "<|endoftext|>",
        "<|fim_prefix|>",
        "<|fim_middle|>",
        "<|fim_suffix|>",
        "<|fim_pad|>",
        "<|repo_name|>",
        "<|file_sep|>",
        "<|im_start|>",
        "<|im_end|>",
    ),
    "codegemma": (
        "<|fim_prefix|>",
        "<|fim_suffix|>",
        "<|fim_middle|>",
        "<|file_separator|>",
        "<end_of_turn>",
        "<eos>",
    ),
    "codestral": ("[PREFIX]", "[SUFFIX]"),
    "granite": ("<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<|end_of_text|>"),
    "granite4": (
        "<|end_of_text|>",
        "<|fim_prefix|>",
        "<|fim_middle|>",
        "<|fim_suffix|>",
        "<|fim_pad|>",
    ),
    "codegeex4": (
        "<|user|>",
        "<|code_suffix|>",
        "<|code_prefix|>",
        "<|code_middle|>",
        "<|assistant|>",
        "<|endoftext|>",
    ),
    "seed-coder": (
        "<[end\u2581of\u2581sentence]>",
        "<[fim-prefix]>",
        "<[fim-middle]>",
        "<[fim-suffix]>",
        "<[PAD\u2581TOKEN]>",
        "<[SEP\u2581TOKEN]>",
        "<[begin\u2581of\u2581sentence]>",
    ),
}
EXPECTED_STOPS["qwen-repo"] = EXPECTED_STOPS["qwen"]


def test_every_family_of_the_issue_is_present() -> None:
    assert set(TEMPLATES) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_template_bytes(name: str) -> None:
    rendered = TEMPLATES[name].render(P, S)
    assert rendered.encode("utf-8") == EXPECTED[name].encode("utf-8")


@pytest.mark.parametrize("name", sorted(EXPECTED_STOPS))
def test_stop_strings(name: str) -> None:
    assert TEMPLATES[name].stop == EXPECTED_STOPS[name]


def test_deepseek_tokens_use_fullwidth_bar_and_lower_block() -> None:
    rendered = TEMPLATES["deepseek"].render("", "")
    tokens = rendered.split(">")[:-1]
    assert len(tokens) == 3
    for token in tokens:
        assert ord(token[1]) == 0xFF5C
        assert ord(token[-1]) == 0xFF5C
        assert 0x2581 in {ord(c) for c in token}
    assert "|" not in rendered
    assert "_" not in rendered
    assert " " not in rendered
    eos = TEMPLATES["deepseek"].stop[3]
    assert [hex(ord(c)) for c in eos if ord(c) > 127] == ["0xff5c", "0x2581", "0x2581", "0xff5c"]


def test_codellama_spacing_is_exact() -> None:
    assert TEMPLATES["codellama"].render("a", "b") == "<PRE> a <SUF>b <MID>"


def test_spm_flags() -> None:
    assert {n for n, t in TEMPLATES.items() if t.spm} == {"codestral", "codegeex4"}
    assert TEMPLATES["codestral"].render("P", "S") == "[SUFFIX]S[PREFIX]P"


def test_qwen_repo_level_with_files() -> None:
    rendered = TEMPLATES["qwen-repo"].render(
        "x = ",
        "\n",
        extra=[("lib/a.py", "A = 1"), ("b.py", "B = 2")],
        filename="main.py",
        repo="proj",
    )
    assert rendered == (
        "<|repo_name|>proj\n<|file_sep|>lib/a.py\nA = 1\n<|file_sep|>b.py\nB = 2\n"
        "<|file_sep|>main.py\n<|fim_prefix|>x = <|fim_suffix|>\n<|fim_middle|>"
    )


def test_qwen_file_level_becomes_repo_level_only_with_context() -> None:
    plain = TEMPLATES["qwen"].render("a", "b")
    assert plain == "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>"
    with_file = TEMPLATES["qwen"].render("a", "b", filename="m.py", extra=[("o.py", "o")])
    assert with_file == TEMPLATES["qwen-repo"].render(
        "a", "b", filename="m.py", extra=[("o.py", "o")]
    )


def test_starcoder_other_files() -> None:
    rendered = TEMPLATES["starcoder"].render("a", "b", extra=[("o.py", "O")], filename="m.py")
    assert rendered == "<file_sep>o.py\nO<file_sep>m.py\n<fim_prefix>a<fim_suffix>b<fim_middle>"
    assert TEMPLATES["starcoder"].render("a", "b", filename="m.py") == (
        "<fim_prefix>a<fim_suffix>b<fim_middle>"
    )


def test_deepseek_repo_level() -> None:
    rendered = TEMPLATES["deepseek"].render(
        "a", "b", extra=[("o.py", "O"), ("p.py", "Q")], filename="m.py"
    )
    assert rendered.startswith("#o.py\nO\n#p.py\nQ\n#m.py\n<\uff5cfim\u2581begin\uff5c>a")


def test_codestral_other_files_go_into_the_prefix() -> None:
    rendered = TEMPLATES["codestral"].render("a", "b", extra=[("o.py", "O")], filename="m.py")
    assert rendered == "[SUFFIX]b[PREFIX]+++++ o.py\nO\n+++++ m.py\na"


def test_codegeex4_with_references_and_language() -> None:
    rendered = TEMPLATES["codegeex4"].render(
        "a", "b", extra=[("o.py", "O")], filename="m.py", language="python"
    )
    assert rendered == (
        "<|user|>\n###REFERENCE:\n###PATH:o.py\nO\n###PATH:m.py\n###LANGUAGE:python\n"
        "###MODE:BLOCK\n<|code_suffix|>b<|code_prefix|>a<|code_middle|><|assistant|>\n"
    )


@pytest.mark.parametrize(
    "name", ["codellama", "santacoder", "codegemma", "granite", "granite4", "seed-coder"]
)
def test_families_without_repo_format_ignore_other_files(name: str) -> None:
    template = TEMPLATES[name]
    assert template.render("a", "b", extra=[("o.py", "O")], filename="m.py") == template.render(
        "a", "b"
    )


def test_get_template_lists_known_names() -> None:
    assert get_template("DeepSeek") is TEMPLATES["deepseek"]
    with pytest.raises(ValueError, match="unknown FIM template 'gpt'") as info:
        get_template("gpt")
    for name in TEMPLATES:
        assert name in str(info.value)


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("qwen2.5-coder:1.5b-base", "qwen"),
        ("qwen2.5-coder:7b-instruct", "qwen"),  # FIM works on instruct, slightly worse
        ("Qwen/Qwen2.5-Coder-32B", "qwen"),
        ("hf.co/bartowski/Qwen2.5-Coder-1.5B-Instruct-GGUF:Q4_K_M", "qwen"),
        ("qwen3-coder:30b", "qwen"),
        ("codeqwen:7b", "starcoder"),
        ("deepseek-coder-v2-lite-base", "deepseek"),
        ("deepseek-ai/deepseek-coder-1.3b-base", "deepseek"),
        ("deepseek-coder:6.7b", "deepseek"),
        ("codellama:7b-code", "codellama"),
        ("CodeLlama-13b-hf", "codellama"),
        ("starcoder2:3b", "starcoder"),
        ("bigcode/starcoderbase-1b", "starcoder"),
        ("stable-code:3b", "starcoder"),
        ("santacoder", "santacoder"),
        ("codestral-latest", "codestral"),
        ("codestral:22b", "codestral"),
        ("codegemma:2b", "codegemma"),
        ("granite-3.3-8b-base", "granite"),
        ("granite3.1-dense:8b", "granite"),
        ("granite3-dense:4b", "granite"),  # a 4B size is not Granite 4
        ("granite-code:34b", "granite"),
        ("granite4:tiny-h", "granite4"),
        ("ibm-granite/granite-4.0-h-micro", "granite4"),
        ("codegeex4:9b", "codegeex4"),
        ("ByteDance-Seed/Seed-Coder-8B-Base", "seed-coder"),
    ],
)
def test_detect_template(model: str, family: str) -> None:
    template = detect_template(model)
    assert template is not None
    assert template.name == family


@pytest.mark.parametrize(
    "model",
    [
        "qwen2.5:7b",  # qwen without coder: a chat model, not StarCoder
        "qwen3:8b",
        "llama3.1:8b",
        "gpt-4o",
        "claude-sonnet-4-5",
        "mamba-codestral-7b",  # no FIM
        "codellama:34b",  # only 7B/13B were trained to infill
        "codellama:7b-python",
        "deepseek-coder:6.7b-instruct",  # FIM lives in the base checkpoint
        "codegemma:7b-it",
        "seed-coder:8b-instruct",
        "granite-embedding:30m",
        "",
    ],
)
def test_detect_template_unknown(model: str) -> None:
    assert detect_template(model) is None


@pytest.mark.parametrize(
    ("tokens", "family"),
    [
        (
            ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|endoftext|>", "<|im_end|>"],
            "qwen",
        ),
        (["<|fim_prefix|>", "<|fim_suffix|>", "<|file_separator|>", "<end_of_turn>"], "codegemma"),
        (["<|fim_prefix|>", "<|fim_suffix|>", "<|end_of_text|>"], "granite4"),
        (["<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<|endoftext|>"], "starcoder"),
        (["<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<|end_of_text|>"], "granite"),
        (["<fim-prefix>", "<fim-suffix>", "<fim-middle>"], "santacoder"),
        (["<\uff5cfim\u2581begin\uff5c>", "<\uff5cfim\u2581hole\uff5c>"], "deepseek"),
        (["\u2581<PRE>", "\u2581<SUF>", "\u2581<MID>", "\u2581<EOT>"], "codellama"),
        (["<PRE>", "<SUF>", "<MID>"], "codellama"),
        (["<|code_prefix|>", "<|code_suffix|>", "<|code_middle|>"], "codegeex4"),
        (["[PREFIX]", "[SUFFIX]", "[MIDDLE]"], "codestral"),
        (["<[fim-prefix]>", "<[fim-suffix]>"], "seed-coder"),
    ],
)
def test_template_from_tokens(tokens: list[str], family: str) -> None:
    template = template_from_tokens(iter(tokens))
    assert template is not None
    assert template.name == family


def test_template_from_tokens_without_fim_tokens() -> None:
    assert template_from_tokens(["<s>", "</s>", "<|im_start|>", "<|im_end|>"]) is None


def test_all_special_tokens_cover_every_family_and_skip_ordinary_spellings() -> None:
    for template in TEMPLATES.values():
        for token in template.stop:
            if token not in {"<PRE>", "<SUF>", "<MID>", "<EOT>", "<eos>", "[PREFIX]", "[SUFFIX]"}:
                assert token in ALL_SPECIAL_TOKENS, token
    assert "<s>" not in ALL_SPECIAL_TOKENS  # HTML strikethrough
    assert "</code>" not in ALL_SPECIAL_TOKENS
    lengths = [len(t) for t in ALL_SPECIAL_TOKENS]
    assert lengths == sorted(lengths, reverse=True)


def test_codestral_multi_file_stop() -> None:
    codestral = TEMPLATES["codestral"]
    assert codestral.stops() == ("[PREFIX]", "[SUFFIX]")
    assert codestral.stops(extra=[("o.py", "O")]) == ("[PREFIX]", "[SUFFIX]", "\n+++++ ")
    assert TEMPLATES["qwen"].stops(extra=[("o.py", "O")]) == TEMPLATES["qwen"].stop


def test_resolve_template() -> None:
    assert resolve_template("granite", model="qwen2.5-coder:1.5b") is TEMPLATES["granite"]
    assert resolve_template("auto", model="qwen2.5-coder:1.5b") is TEMPLATES["qwen"]
    # the server's tokens outrank the name (a renamed GGUF)
    tokens = ["<\uff5cfim\u2581begin\uff5c>", "<\uff5cfim\u2581hole\uff5c>"]
    assert resolve_template("auto", model="my-model", tokens=tokens) is TEMPLATES["deepseek"]
    assert resolve_template("Auto", model="llama3.1:8b") is None
    with pytest.raises(ValueError, match="known templates"):
        resolve_template("qwen2", model="x")
