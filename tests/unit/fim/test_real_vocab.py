"""Templates checked against real tokenizers: the vocab-only GGUF files that llama.cpp ships
(inside the llama-cpp-python sdist that .ci/llama-server.sh downloads).

Every special token a template writes or stops on must be one token of the model's real
vocabulary, spelled byte for byte; a look-alike (ASCII ``|`` for DeepSeek's U+FF5C) would be
split into ordinary text tokens and the model would never see a FIM prompt.
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from anyfill.daemon.fim.templates import TEMPLATES, template_from_tokens
from tests.unit.fim.gguf_vocab import gguf_tokens

pytestmark = pytest.mark.llamacpp

REPO = Path(__file__).parents[3]


def _sdist() -> Path | None:
    assets = os.environ.get("ANYFILL_LLAMA_ASSETS", "").strip()
    if not assets and (REPO / ".venv" / "llama-assets").is_file():
        assets = (REPO / ".venv" / "llama-assets").read_text().strip()
    if not assets:
        return None
    found = sorted((Path(assets) / "dl").glob("llama_cpp_python-*.tar.gz"))
    return found[-1] if found else None


@pytest.fixture(scope="module")
def vocabs() -> dict[str, list[str]]:
    sdist = _sdist()
    if sdist is None:
        pytest.skip(
            "no llama-cpp-python sdist: run `bash .ci/llama-server.sh` (scripts/setup --dev)"
        )
    wanted = {"deepseek-coder", "starcoder", "qwen2"}
    found: dict[str, list[str]] = {}
    with tarfile.open(sdist) as archive:
        for member in archive:
            name = Path(member.name).name
            stem = name.removeprefix("ggml-vocab-").removesuffix(".gguf")
            if name.endswith(".gguf") and "/models/" in member.name and stem in wanted:
                stream = archive.extractfile(member)
                assert stream is not None
                found[stem] = gguf_tokens(stream)
    assert set(found) == wanted, f"vocab files missing from {sdist.name}"
    return found


def _template_tokens(name: str) -> set[str]:
    template = TEMPLATES[name]
    return {template.prefix_token, template.suffix_token, template.middle_token, *template.stop}


@pytest.mark.parametrize(
    ("family", "vocab"), [("deepseek", "deepseek-coder"), ("starcoder", "starcoder")]
)
def test_every_template_token_is_one_real_token(
    vocabs: dict[str, list[str]], family: str, vocab: str
) -> None:
    tokens = set(vocabs[vocab])
    missing = sorted(t for t in _template_tokens(family) if t not in tokens)
    assert missing == []


def test_deepseek_tokens_are_not_ascii_lookalikes(vocabs: dict[str, list[str]]) -> None:
    tokens = set(vocabs["deepseek-coder"])
    for token in _template_tokens("deepseek"):
        ascii_lookalike = token.replace("\uff5c", "|").replace("\u2581", "_")
        assert token in tokens
        assert ascii_lookalike not in tokens


@pytest.mark.parametrize(
    ("vocab", "family"), [("deepseek-coder", "deepseek"), ("starcoder", "starcoder")]
)
def test_template_from_real_vocab(vocabs: dict[str, list[str]], vocab: str, family: str) -> None:
    template = template_from_tokens(vocabs[vocab])
    assert template is not None
    assert template.name == family


def test_vocab_without_fim_tokens(vocabs: dict[str, list[str]]) -> None:
    # Qwen2 (not 2.5-Coder): ChatML tokens but no FIM tokens, so no template.
    assert "<|im_end|>" in vocabs["qwen2"]
    assert template_from_tokens(vocabs["qwen2"]) is None
