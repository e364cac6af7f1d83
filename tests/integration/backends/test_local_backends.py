"""llama.cpp and Ollama: what anyfill sends, and how it picks native FIM or a template."""

from __future__ import annotations

import pytest

from anyfill.daemon.backends.base import FimPrompt
from anyfill.daemon.errors import ConfigError, ModelNotFound, ServerError, UnsupportedFeature
from tests.integration.backends.helpers import SEED, Recorder, backend_for, collect
from tests.servers import SEED_ANSWER, LlamaCpp, Ollama, Reply
from tests.servers.fixtures import StartServer

QWEN_SEED = '<|fim_prefix|>print("Hel<|fim_suffix|>)<|fim_middle|>'
STARCODER_SEED = '<fim_prefix>print("Hel<fim_suffix>)<fim_middle>'

# -- llama.cpp ---------------------------------------------------------------------------


async def test_llamacpp_infill_request(loopback: StartServer) -> None:
    srv = await loopback(LlamaCpp())
    prompt = FimPrompt(
        prefix='print("Hel',
        suffix=")",
        max_tokens=32,
        extra=(("util.py", "def f(): pass\n"),),
        single_line=True,
    )
    recorder = Recorder()
    async with backend_for("llamacpp", srv.url, stop=["END"]) as be:
        assert "".join(await collect(be, prompt, recorder)) == SEED_ANSWER
    (request,) = srv.requests
    assert request.path == "/infill"
    body = request.json()
    assert body["input_prefix"] == 'print("Hel'
    assert body["input_suffix"] == ")"
    assert body["input_extra"] == [{"filename": "util.py", "text": "def f(): pass\n"}]
    assert body["n_predict"] == 32
    assert body["cache_prompt"] is True
    assert body["stream"] is True
    assert body["t_max_predict_ms"] > 0
    assert body["stop"] == ["\n", "END"]
    assert "authorization" not in request.headers
    assert recorder.plans[0].mode == "native"
    assert recorder.plans[0].note == ""


async def test_llamacpp_max_tokens_falls_back_to_config(loopback: StartServer) -> None:
    srv = await loopback(LlamaCpp())
    async with backend_for("llamacpp", srv.url, max_tokens=77) as be:
        await collect(be, FimPrompt(prefix="a", suffix="b", max_tokens=0))
    assert srv.requests[0].json()["n_predict"] == 77


async def test_llamacpp_options_are_sent_verbatim(loopback: StartServer) -> None:
    srv = await loopback(LlamaCpp())
    options = {"id_slot": 0, "t_max_predict_ms": 250, "samplers": ["top_k", "infill"]}
    async with backend_for("llamacpp", srv.url, options=options) as be:
        await collect(be)
    body = srv.requests[0].json()
    assert body["id_slot"] == 0
    assert body["t_max_predict_ms"] == 250
    assert body["samplers"] == ["top_k", "infill"]


async def test_llamacpp_api_key_is_a_bearer_token(loopback: StartServer) -> None:
    srv = await loopback(LlamaCpp(api_key="secret"))
    async with backend_for("llamacpp", srv.url, api_key="secret") as be:
        assert "".join(await collect(be)) == SEED_ANSWER
    assert srv.requests[0].headers["authorization"] == "Bearer secret"


async def test_llamacpp_501_falls_back_to_template_by_model_name(loopback: StartServer) -> None:
    srv = await loopback(LlamaCpp(fim=False, model_path="/models/qwen2.5-coder-1.5b-q8_0.gguf"))
    recorder = Recorder()
    async with backend_for("llamacpp", srv.url) as be:
        assert "".join(await collect(be, SEED, recorder)) == SEED_ANSWER
        assert "".join(await collect(be, SEED, recorder)) == SEED_ANSWER
    assert srv.paths() == ["/infill", "/props", "/completion", "/completion"]
    body = srv.requests[2].json()
    assert body["prompt"] == QWEN_SEED
    assert "<|endoftext|>" in body["stop"]
    assert body["cache_prompt"] is True
    plan = recorder.plans[0]
    assert plan.mode == "template"
    assert plan.template == "qwen"
    assert "/infill answered 501" in plan.note
    assert "qwen" in plan.note
    assert recorder.plans[1] == plan


async def test_llamacpp_501_falls_back_to_template_by_tokens(loopback: StartServer) -> None:
    # A model file named after nothing, whose vocabulary holds StarCoder's FIM tokens.
    srv = await loopback(
        LlamaCpp(fim=False, model_path="/m/mystery.gguf", vocab=("<fim_prefix>", "<fim_suffix>"))
    )
    recorder = Recorder()
    async with backend_for("llamacpp", srv.url) as be:
        await collect(be, SEED, recorder)
    assert recorder.plans[0].template == "starcoder"
    assert "from its tokens" in recorder.plans[0].note
    completion = next(r for r in srv.requests if r.path == "/completion")
    assert completion.json()["prompt"] == STARCODER_SEED
    probes = [r.json()["content"] for r in srv.requests if r.path == "/tokenize"]
    assert "<fim_prefix>" in probes


async def test_llamacpp_501_without_any_template_is_a_clear_error(
    loopback: StartServer,
) -> None:
    srv = await loopback(LlamaCpp(fim=False, model_path="/m/smollm2-135m.gguf"))
    async with backend_for("llamacpp", srv.url) as be:
        with pytest.raises(UnsupportedFeature) as caught:
            await collect(be)
    message = str(caught.value)
    assert "/infill answered 501" in message
    assert "smollm2-135m" in message
    assert 'set template = "<family>"' in message
    assert not caught.value.retryable


async def test_llamacpp_explicit_template_goes_to_completion(loopback: StartServer) -> None:
    srv = await loopback(LlamaCpp())
    recorder = Recorder()
    async with backend_for("llamacpp", srv.url, template="starcoder") as be:
        await collect(be, SEED, recorder)
    assert srv.paths() == ["/completion"]
    assert srv.requests[0].json()["prompt"] == STARCODER_SEED
    assert recorder.plans[0].template == "starcoder"
    assert recorder.plans[0].note == ""


async def test_llamacpp_unknown_template_name_is_a_config_error(loopback: StartServer) -> None:
    srv = await loopback(LlamaCpp())
    async with backend_for("llamacpp", srv.url, template="nonesuch") as be:
        with pytest.raises(ConfigError, match="known templates"):
            await collect(be)


async def test_llamacpp_batch_sends_a_prompt_list(loopback: StartServer) -> None:
    srv = await loopback(LlamaCpp(Reply(batch=["one", "two"])))
    prompts = [FimPrompt(prefix="a", suffix="b"), FimPrompt(prefix="c", suffix="d")]
    async with backend_for("llamacpp", srv.url, template="starcoder") as be:
        results = await be.complete_batch(prompts)
    assert [r.text for r in results] == ["one", "two"]
    request = srv.requests[-1]
    assert request.path == "/v1/completions"
    assert request.json()["prompt"] == [
        "<fim_prefix>a<fim_suffix>b<fim_middle>",
        "<fim_prefix>c<fim_suffix>d<fim_middle>",
    ]
    assert request.json()["stream"] is False


async def test_llamacpp_still_loading_is_retryable(loopback: StartServer) -> None:
    srv = await loopback(LlamaCpp(loading=True))
    async with backend_for("llamacpp", srv.url) as be:
        with pytest.raises(ServerError, match="is still loading its model") as caught:
            await collect(be)
    assert caught.value.retryable


# -- Ollama ----------------------------------------------------------------------------------


async def test_ollama_native_suffix_when_the_model_can_insert(loopback: StartServer) -> None:
    srv = await loopback(Ollama())
    recorder = Recorder()
    prompt = FimPrompt(prefix='print("Hel', suffix=")", max_tokens=40)
    async with backend_for("ollama", srv.url, model="qwen2.5-coder:1.5b-base") as be:
        assert "".join(await collect(be, prompt, recorder)) == SEED_ANSWER
        await collect(be, prompt)
    assert srv.paths() == ["/api/show", "/api/generate", "/api/generate"]
    body = srv.requests[1].json()
    assert body["model"] == "qwen2.5-coder:1.5b-base"
    assert body["prompt"] == 'print("Hel'
    assert body["suffix"] == ")"
    assert body["stream"] is True
    assert body["keep_alive"] == "30m"
    assert body["options"]["num_predict"] == 40
    assert "raw" not in body
    assert recorder.plans[0].mode == "native"
    assert recorder.usages[0].prompt_tokens == 7


@pytest.mark.parametrize("capabilities", [True, False], ids=["capabilities", "template-only"])
async def test_ollama_raw_template_when_the_model_cannot_insert(
    loopback: StartServer, capabilities: bool
) -> None:
    srv = await loopback(Ollama(capabilities=capabilities))
    recorder = Recorder()
    async with backend_for("ollama", srv.url, model="starcoder2:3b") as be:
        assert "".join(await collect(be, SEED, recorder)) == SEED_ANSWER
    body = srv.requests[-1].json()
    assert body["raw"] is True
    assert body["prompt"] == STARCODER_SEED
    assert "suffix" not in body
    assert "<file_sep>" in body["options"]["stop"]
    assert recorder.plans[0].template == "starcoder"
    assert "lacks .Suffix" in recorder.plans[0].note


async def test_ollama_keep_alive_can_be_configured(loopback: StartServer) -> None:
    srv = await loopback(Ollama())
    async with backend_for(
        "ollama", srv.url, model="qwen2.5-coder:1.5b-base", options={"keep_alive": -1}
    ) as be:
        await collect(be)
    assert srv.requests[-1].json()["keep_alive"] == -1


async def test_ollama_chat_model_without_template_is_a_clear_error(
    loopback: StartServer,
) -> None:
    srv = await loopback(Ollama())
    async with backend_for("ollama", srv.url, model="llama3.2") as be:
        with pytest.raises(UnsupportedFeature, match=r"qwen2.5-coder:1.5b-base"):
            await collect(be)
    assert "/api/generate" not in srv.paths()


async def test_ollama_unknown_model_says_pull(loopback: StartServer) -> None:
    srv = await loopback(Ollama())
    async with backend_for("ollama", srv.url, model="nope:7b") as be:
        with pytest.raises(ModelNotFound) as caught:
            await collect(be)
    assert "model 'nope:7b' not found on backend 'test-ollama'" in str(caught.value)
    assert "ollama pull" in str(caught.value)


async def test_ollama_without_model_is_a_config_error(loopback: StartServer) -> None:
    srv = await loopback(Ollama())
    async with backend_for("ollama", srv.url) as be:
        with pytest.raises(ConfigError, match="needs a model name"):
            await collect(be)


async def test_llamacpp_batch_without_a_template_uses_infill_one_by_one(
    loopback: StartServer,
) -> None:
    # A FIM model whose family neither its name nor its tokens tell.
    srv = await loopback(LlamaCpp(model_path="/m/mystery.gguf", vocab=()))
    prompts = [FimPrompt(prefix="a", suffix="b"), FimPrompt(prefix="c", suffix="d")]
    async with backend_for("llamacpp", srv.url) as be:
        results = await be.complete_batch(prompts)
    assert [r.text for r in results] == [SEED_ANSWER, SEED_ANSWER]
    infills = sorted(r.json()["input_prefix"] for r in srv.requests if r.path == "/infill")
    assert infills == ["a", "c"]


async def test_ollama_options_table_merges_with_anyfills(loopback: StartServer) -> None:
    srv = await loopback(Ollama())
    options = {"options": {"num_ctx": 8192, "top_k": 20}}
    async with backend_for(
        "ollama", srv.url, model="qwen2.5-coder:1.5b-base", max_tokens=33, options=options
    ) as be:
        await collect(be, FimPrompt(prefix="a", suffix="b", max_tokens=0))
    sent = srv.requests[-1].json()["options"]
    assert sent["num_ctx"] == 8192
    assert sent["top_k"] == 20
    assert sent["num_predict"] == 33
