"""FIM base models anyfill offers to download, pinned to one file each.

Each entry pins the Hub revision (a commit), so the file never changes under a name, and
carries the file's size and SHA-256. The figures were taken from public catalogues that
agree with each other; anyfill could not download the files where it was built, so the
download also checks the SHA-256 the Hub itself reports (its ETag for LFS files) against
the pinned one and refuses a mismatch.

Only *base* models with FIM tokens work: instruct models answer with chat, not the middle.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CATALOG", "OTHER_FIM_MODELS", "CatalogModel", "find"]


@dataclass(frozen=True)
class CatalogModel:
    name: str
    """What the config and ``anyfill model`` call it."""
    label: str
    repo_id: str
    filename: str
    revision: str
    size: int
    sha256: str
    license: str
    note: str

    @property
    def size_text(self) -> str:
        return human_size(self.size)


CATALOG: tuple[CatalogModel, ...] = (
    CatalogModel(
        name="qwen2.5-coder-1.5b",
        label="Qwen2.5-Coder 1.5B base, Q8_0",
        repo_id="ggml-org/Qwen2.5-Coder-1.5B-Q8_0-GGUF",
        filename="qwen2.5-coder-1.5b-q8_0.gguf",
        revision="8be1b8a895a84beea772817caaa71eba6b6e0d07",
        size=1_646_573_056,
        sha256="29871c94d15727a6e243f79a37113d4ae625a6215b5e800bf41a23af2da32832",
        license="Apache-2.0",
        note="the default: good single- and multi-line completions on a CPU; ~2 GB of RAM",
    ),
    CatalogModel(
        name="qwen2.5-coder-0.5b",
        label="Qwen2.5-Coder 0.5B base, Q8_0",
        repo_id="ggml-org/Qwen2.5-Coder-0.5B-Q8_0-GGUF",
        filename="qwen2.5-coder-0.5b-q8_0.gguf",
        revision="5788aee90e725673490be18f553d234feaa8303d",
        size=531_068_128,
        sha256="d0f8cd6c49bab52a0abdbe47948518b1f4d9b1a8a2a6825099cea31cea10ac56",
        license="Apache-2.0",
        note="smaller and faster, weaker; for slow machines or < 4 GB of RAM",
    ),
)

#: Other FIM base models that work with a managed server: download a GGUF yourself and
#: ``anyfill model use /path/to/file.gguf``. The template is found from the GGUF's tokens.
OTHER_FIM_MODELS: tuple[tuple[str, str], ...] = (
    ("Qwen2.5-Coder 3B / 7B / 14B base", "ggml-org/Qwen2.5-Coder-{3B,7B,14B}-Q8_0-GGUF"),
    ("Codestral 22B", "Mistral's FIM model; a Q4_K_M GGUF needs ~14 GB of RAM"),
    ("DeepSeek-Coder 1.3B / 6.7B base", "the *-base GGUFs, not -instruct"),
    ("StarCoder2 3B / 7B / 15B", "any GGUF of bigcode/starcoder2-*"),
    ("CodeGemma 2B / 7B", "the code (not -it) GGUFs"),
    ("Granite 3B / 8B code base", "ibm-granite/granite-*-code-base GGUFs"),
)


def find(name: str) -> CatalogModel | None:
    for model in CATALOG:
        if model.name == name.lower():
            return model
    return None


def human_size(size: int) -> str:
    if size >= 1_000_000_000_000:
        return f"{size / 1e12:.1f} TB"
    if size >= 1_000_000_000:
        return f"{size / 1e9:.2f} GB"
    if size >= 1_000_000:
        return f"{size / 1e6:.0f} MB"
    return f"{size / 1e3:.0f} kB"
