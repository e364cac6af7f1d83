"""OpenAI completions and chat, Mistral FIM, Anthropic and Gemini: what anyfill sends
(paths, fields, headers, stop lists) and the shape of their answers."""

from __future__ import annotations

import pytest

from anyfill.daemon.backends.base import FimPrompt
from anyfill.daemon.errors import AuthError, BadRequest, ConfigError, ModelNotFound, ServerError
from anyfill.daemon.fim.chat import CHAT_STOP, HOLE
from tests.integration.backends.helpers import (
    KEY,
    SEED,
    Recorder,
    assert_hidden,
    backend_for,
    collect,
    text_opted_in,
)
from tests.servers import SEED_ANSWER, Anthropic, Gemini, MistralFim, OpenAI, Reply
from tests.servers.fixtures import StartServer

QWEN_SEED = '<|fim_prefix|>print("Hel<|fim_suffix|>)<|fim_middle|>'

# -- OpenAI-compatible completions ----------------------------------------------------------


async def test_completions_templated_prompt(loopback: StartServer) -> None:
    srv = await loopback(OpenAI(api_key=KEY, reject_suffix="suffix is not currently supported"))
    recorder = Recorder()
    async with backend_for(
        "openai-completions", srv.url, api_key=KEY, model="Qwen/Qwen2.5-Coder-1.5B"
    ) as be:
        assert "".join(await collect(be, SEED, recorder)) == SEED_ANSWER
    (request,) = srv.requests
    assert request.path == "/v1/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    body = request.json()
    assert body["model"] == "Qwen/Qwen2.5-Coder-1.5B"
    assert body["prompt"] == QWEN_SEED
    assert "suffix" not in body
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert "<|endoftext|>" in body["stop"]
    assert recorder.plans[0].mode == "template"
    assert recorder.plans[0].template == "qwen"


async def test_completions_url_with_version_segment(loopback: StartServer) -> None:
    srv = await loopback(OpenAI())
    async with backend_for("openai-completions", srv.url + "/v1", model="starcoder2-3b") as be:
        await collect(be)
    assert srv.paths() == ["/v1/completions"]


async def test_completions_native_suffix_on_deepseek_beta(loopback: StartServer) -> None:
    srv = await loopback(OpenAI())
    recorder = Recorder()
    async with backend_for("openai-completions", srv.url + "/beta", model="deepseek-chat") as be:
        await collect(be, SEED, recorder)
    request = srv.requests[0]
    assert request.path == "/beta/completions"
    assert request.json()["prompt"] == 'print("Hel'
    assert request.json()["suffix"] == ")"
    assert recorder.plans[0].mode == "native"


async def test_completions_auto_suffix_refused_switches_to_template(
    loopback: StartServer,
) -> None:
    srv = await loopback(OpenAI(reject_suffix="suffix is not currently supported"))
    recorder = Recorder()
    async with backend_for("openai-completions", srv.url + "/beta", model="qwen2.5-coder-7b") as be:
        assert "".join(await collect(be, SEED, recorder)) == SEED_ANSWER
        await collect(be, SEED, recorder)
    bodies = [r.json() for r in srv.requests]
    assert "suffix" in bodies[0]
    assert "suffix" not in bodies[1]
    assert bodies[1]["prompt"] == QWEN_SEED
    assert "suffix" not in bodies[2]  # remembered
    assert "refused 'suffix'" in recorder.plans[0].note


async def test_completions_forced_native_suffix_refused_is_reported(
    loopback: StartServer,
) -> None:
    srv = await loopback(OpenAI(reject_suffix="Unsupported param: suffix"))
    async with backend_for(
        "openai-completions", srv.url, model="m", options={"native_suffix": True}
    ) as be:
        with pytest.raises(BadRequest, match="refused the 'suffix' field") as caught:
            await collect(be)
    assert "options.native_suffix = true sends: set it to" in str(caught.value)
    assert "Unsupported param" not in str(caught.value)  # the server's words stay hidden


async def test_completions_stop_list_kept_within_the_limit(loopback: StartServer) -> None:
    srv = await loopback(OpenAI(max_stop=4))
    async with backend_for(
        "openai-completions", srv.url, model="qwen2.5-coder", options={"max_stop": 4}
    ) as be:
        assert "".join(await collect(be)) == SEED_ANSWER
    stops = srv.requests[0].json()["stop"]
    assert len(stops) == 4
    assert "max_stop" not in srv.requests[0].json()


async def test_completions_without_template_or_suffix_is_a_config_error(
    loopback: StartServer,
) -> None:
    srv = await loopback(OpenAI())
    async with backend_for("openai-completions", srv.url, model="my-finetune") as be:
        with pytest.raises(
            ConfigError, match="cannot tell the FIM template of model 'my-finetune'"
        ):
            await collect(be)
    assert srv.requests == []


async def test_completions_batch_is_one_request_with_a_prompt_list(loopback: StartServer) -> None:
    srv = await loopback(OpenAI(Reply(batch=["x = 1", "y = 2", "z = 3"])))
    prompts = [FimPrompt(prefix=p, suffix="\n") for p in ("a", "b", "c")]
    recorder = Recorder()
    async with backend_for("openai-completions", srv.url, model="starcoder2") as be:
        results = await be.complete_batch(prompts, recorder)
    assert [r.text for r in results] == ["x = 1", "y = 2", "z = 3"]
    assert all(r.error is None for r in results)
    (request,) = srv.requests
    assert request.json()["prompt"] == [
        f"<fim_prefix>{p}<fim_suffix>\n<fim_middle>" for p in ("a", "b", "c")
    ]
    assert request.json()["stream"] is False
    assert recorder.usages[0].prompt_tokens == 21


async def test_completions_batch_on_native_suffix_runs_one_by_one(
    loopback: StartServer,
) -> None:
    srv = await loopback(OpenAI())
    prompts = [FimPrompt(prefix=p, suffix=")") for p in ("a", "b")]
    async with backend_for("openai-completions", srv.url + "/beta", model="deepseek-chat") as be:
        results = await be.complete_batch(prompts)
    assert [r.text for r in results] == [SEED_ANSWER, SEED_ANSWER]
    assert sorted(r.json()["prompt"] for r in srv.requests) == ["a", "b"]


# -- Mistral FIM --------------------------------------------------------------------------------


async def test_mistral_fim_request(loopback: StartServer) -> None:
    srv = await loopback(MistralFim(api_key=KEY))
    prompt = FimPrompt(prefix='print("Hel', suffix=")", max_tokens=20, stop=("\n\n",))
    recorder = Recorder()
    async with backend_for("mistral-fim", srv.url, api_key=KEY, model="codestral-2501") as be:
        assert "".join(await collect(be, prompt, recorder)) == SEED_ANSWER
    (request,) = srv.requests
    assert request.path == "/v1/fim/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.json() == {
        "model": "codestral-2501",
        "prompt": 'print("Hel',
        "suffix": ")",
        "max_tokens": 20,
        "temperature": 0.1,
        "stream": True,
        "stop": ["\n\n"],
    }
    assert recorder.plans[0].mode == "native"


async def test_mistral_refused_key_explains_the_two_hosts(loopback: StartServer) -> None:
    srv = await loopback(MistralFim(api_key=KEY))
    async with backend_for("mistral-fim", srv.url, api_key="codestral-key") as be:
        with pytest.raises(AuthError) as caught:
            await collect(be)
    assert "codestral.mistral.ai" in str(caught.value)
    assert "api.mistral.ai" in str(caught.value)
    assert_hidden(str(caught.value), "Unauthorized")


# -- chat backends ------------------------------------------------------------------------------


async def test_openai_chat_request(loopback: StartServer) -> None:
    srv = await loopback(OpenAI(api_key=KEY))
    recorder = Recorder()
    async with backend_for("openai-chat", srv.url, api_key=KEY, model="gpt-test") as be:
        assert "".join(await collect(be, SEED, recorder)) == SEED_ANSWER
    (request,) = srv.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    body = request.json()
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert body["messages"][1]["content"] == f'<document>print("Hel{HOLE})</document>'
    assert body["stop"] == list(CHAT_STOP)
    assert body["max_tokens"] == 128
    assert body["stream"] is True
    assert recorder.plans[0].mode == "chat"


async def test_anthropic_request_has_no_prefill(loopback: StartServer) -> None:
    srv = await loopback(Anthropic(api_key=KEY))
    recorder = Recorder()
    prompt = FimPrompt(prefix='print("Hel', suffix=")", single_line=True)
    async with backend_for("anthropic", srv.url, api_key=KEY, model="claude-test") as be:
        assert "".join(await collect(be, prompt, recorder)) == SEED_ANSWER
    (request,) = srv.requests
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    body = request.json()
    assert body["model"] == "claude-test"
    assert body["messages"] == [
        {"role": "user", "content": f'<document>print("Hel{HOLE})</document>'}
    ]
    assert "no line breaks" in body["system"]
    assert body["stop_sequences"] == list(CHAT_STOP)
    assert body["stream"] is True
    assert recorder.usages[-1].prompt_tokens == 7
    assert recorder.plans[0].mode == "chat"


async def test_anthropic_overloaded_error_event_is_retryable(loopback: StartServer) -> None:
    srv = await loopback(Anthropic(Reply(midstream_error="Overloaded")))
    async with backend_for("anthropic", srv.url, model="claude-test") as be:
        with pytest.raises(ServerError, match="failed with HTTP 529") as caught:
            await collect(be)
    assert "error code: 'overloaded_error'" in str(caught.value)
    assert_hidden(str(caught.value), "Overloaded")
    assert caught.value.retryable
    assert caught.value.status == 529


async def test_gemini_request(loopback: StartServer) -> None:
    srv = await loopback(Gemini(api_key=KEY))
    recorder = Recorder()
    async with backend_for("gemini", srv.url, api_key=KEY, model="gemini-2.5-flash") as be:
        chunks = await collect(be, SEED, recorder)
    assert "".join(chunks) == SEED_ANSWER
    (request,) = srv.requests
    assert request.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    assert request.query == {"alt": ["sse"]}
    assert request.headers["x-goog-api-key"] == KEY
    assert KEY not in request.target
    body = request.json()
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": f'<document>print("Hel{HOLE})</document>'}]}
    ]
    assert body["systemInstruction"]["parts"][0]["text"].startswith("You fill the hole")
    assert body["generationConfig"]["stopSequences"] == list(CHAT_STOP)
    assert body["generationConfig"]["maxOutputTokens"] == 128
    assert recorder.usages[-1].completion_tokens == len(chunks)


async def test_gemini_bad_key_400_is_an_auth_error(loopback: StartServer) -> None:
    srv = await loopback(Gemini(api_key=KEY))
    async with backend_for("gemini", srv.url, api_key="nope", model="gemini-2.5-flash") as be:
        with pytest.raises(AuthError, match="'test-gemini' was refused") as caught:
            await collect(be)
    assert "error code: 'INVALID_ARGUMENT'" in str(caught.value)  # Gemini's error.status
    assert "API key not valid" not in str(caught.value)
    srv = await loopback(Gemini(api_key=KEY))
    async with backend_for("gemini", srv.url, api_key="nope", model="gemini-2.5-flash") as be:
        with text_opted_in(), pytest.raises(AuthError, match="API key not valid"):
            await collect(be)


async def test_default_model_is_named_in_errors(loopback: StartServer) -> None:
    srv = await loopback(MistralFim(Reply(error="not_found")))
    async with backend_for("mistral-fim", srv.url, api_key=KEY) as be:
        with pytest.raises(ModelNotFound, match="model 'codestral-latest' not found"):
            await collect(be)
    assert srv.requests[0].json()["model"] == "codestral-latest"


async def test_gemini_generation_config_option_merges(loopback: StartServer) -> None:
    srv = await loopback(Gemini())
    options = {"generationConfig": {"thinkingConfig": {"thinkingBudget": 0}}}
    async with backend_for("gemini", srv.url, api_key=KEY, options=options) as be:
        await collect(be)
    config = srv.requests[0].json()["generationConfig"]
    assert config["thinkingConfig"] == {"thinkingBudget": 0}
    assert config["maxOutputTokens"] == 128
    assert config["stopSequences"] == list(CHAT_STOP)
