"""What clients of OpenAI-compatible servers rely on (issue 22), through the official
`openai` client and lm-evaluation-harness: exact completion text, echo/prompt logprobs
equal to `pagoda eval loglikelihood` (with prefix caching on and off), /tokenize with
tools, 404 model_not_found, tool_choice handling."""

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest

from conftest import BINARY, FIXTURES, STORIES, stories_args

QWEN_TEMPLATE = FIXTURES / "chat-templates" / "Qwen-Qwen2.5-7B-Instruct.jinja"
# Small enough that Qwen2.5's tool prompt fits stories260K's 512-token context.
TOOLS = [{
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
}]
PROMPTS = [
    "Once upon a time there was",
    "Lily and Ben went to the park. They saw a big dog",
    "The sun was shining and the birds were singing. Tom wanted to play with his ball",
]


def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0, timeout=300)


def post(server, path, body):
    return httpx.post(server.base + path, json=body, timeout=300)


@pytest.fixture(scope="module")
def tools_server(start_server):
    """stories260K with Qwen2.5's template (it renders tools) and the hermes parser."""
    return start_server(stories_args("--chat-template", str(QWEN_TEMPLATE), "--served-model-name", "stories",
                                     "--tool-call-parser", "hermes"), "tools")


@pytest.fixture(scope="module")
def no_prefix_cache(start_server):
    return start_server(stories_args("--served-model-name", "stories", "--no-enable-prefix-caching"), "nocache")


def eval_loglikelihood(tmp_path, lines):
    """`pagoda eval loglikelihood --json` on JSONL lines (the forward `pagoda eval` runs)."""
    data = tmp_path / "ll.jsonl"
    data.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = subprocess.run([str(BINARY), "eval", "loglikelihood", *stories_args(), "--data", str(data), "--json"],
                         check=True, capture_output=True, text=True, timeout=600)
    return json.loads(out.stdout)["results"]


# ---- exact text ----

def test_completion_appended_to_its_prompt_is_the_whole_sequence(stories):
    c = client(stories)
    for prompt in PROMPTS:
        r = c.completions.create(model="stories", prompt=prompt, max_tokens=16, temperature=0,
                                 extra_body={"return_token_ids": True, "ignore_eos": True})
        choice = r.choices[0].model_dump()
        ids = choice["prompt_token_ids"] + choice["token_ids"]
        whole = post(stories, "/detokenize", {"tokens": ids}).json()["prompt"]
        prompt_text = post(stories, "/detokenize", {"tokens": choice["prompt_token_ids"]}).json()["prompt"]
        assert prompt_text + r.choices[0].text == whole
        streamed = "".join(ch.choices[0].text for ch in c.completions.create(
            model="stories", prompt=prompt, max_tokens=16, temperature=0, stream=True,
            extra_body={"ignore_eos": True}) if ch.choices)
        assert streamed == r.choices[0].text
    first = c.completions.create(model="stories", prompt=PROMPTS[0], max_tokens=4, temperature=0)
    assert first.choices[0].text.startswith(" ")  # " a little ...", not "a little ..."


def test_pagoda_generate_prints_the_continuation(tmp_path):
    out = subprocess.run([str(BINARY), "generate", *stories_args(), "--prompt", PROMPTS[0], "--max-tokens", "8",
                          "--temperature", "0", "--ignore-eos"], check=True, capture_output=True, text=True,
                         timeout=300).stdout
    as_json = json.loads(subprocess.run(
        [str(BINARY), "generate", *stories_args(), "--prompt", PROMPTS[0], "--max-tokens", "8", "--temperature", "0",
         "--ignore-eos", "--json"], check=True, capture_output=True, text=True, timeout=300).stdout)
    assert as_json["text"].startswith(" ")
    assert out == as_json["text"] + "\n"


# ---- echo / prompt logprobs ----

def echo_logprobs(server, ids, k=1):
    r = client(server).completions.create(model="stories", prompt=ids, max_tokens=1, temperature=0, logprobs=k,
                                          echo=True)
    return r


def test_echo_logprobs_equal_pagoda_eval_with_prefix_caching_on_and_off(stories, no_prefix_cache, tmp_path):
    ids_list = [post(stories, "/tokenize", {"prompt": p}).json()["tokens"] for p in PROMPTS]
    reference = eval_loglikelihood(tmp_path, [{"prompt_ids": ids} for ids in ids_list])
    for server, cached in ((stories, True), (no_prefix_cache, False)):
        for ids, ref in zip(ids_list, reference):
            if cached:  # the prompt's blocks are now in the prefix cache
                warm = client(server).completions.create(model="stories", prompt=ids, max_tokens=1, temperature=0)
                again = client(server).completions.create(model="stories", prompt=ids, max_tokens=1, temperature=0)
                assert len(ids) < 16 or again.usage.prompt_tokens_details.cached_tokens > 0, warm
            r = echo_logprobs(server, ids)
            lp = r.choices[0].logprobs
            assert r.usage.prompt_tokens_details.cached_tokens == 0  # recomputed, not served from the cache
            assert len(lp.tokens) == len(ids) + 1 == len(lp.token_logprobs) == len(lp.top_logprobs)
            assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
            assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
            for got, want in zip(lp.token_logprobs[1:len(ids)], ref["token_logprobs"][1:]):
                assert abs(got - want) < 1e-4, (got, want)
            for got, top in zip(lp.token_logprobs[1:], lp.top_logprobs[1:]):
                assert len(top) >= 1 and max(top.values()) >= got - 1e-9
            assert r.choices[0].text.startswith(post(server, "/detokenize", {"tokens": ids}).json()["prompt"])


def test_vllm_prompt_logprobs(stories, tmp_path):
    ids = post(stories, "/tokenize", {"prompt": PROMPTS[1]}).json()["tokens"]
    ref = eval_loglikelihood(tmp_path, [{"prompt_ids": ids}])[0]["token_logprobs"]
    for stream in (False, True):
        body = {"model": "stories", "prompt": ids, "max_tokens": 2, "temperature": 0, "prompt_logprobs": 2,
                "stream": stream}
        if stream:
            with httpx.stream("POST", stories.base + "/v1/completions", json=body, timeout=300) as resp:
                chunks = [json.loads(line[6:]) for line in resp.iter_lines() if line.startswith("data: {")]
            pl = [c["choices"][0] for c in chunks if c["choices"] and "prompt_logprobs" in c["choices"][0]]
            assert len(pl) == 1
            pl = pl[0]["prompt_logprobs"]
        else:
            pl = post(stories, "/v1/completions", body).json()["choices"][0]["prompt_logprobs"]
        assert pl[0] is None and len(pl) == len(ids)
        for pos, (entry, tok) in enumerate(zip(pl[1:], ids[1:]), start=1):
            assert abs(entry[str(tok)]["logprob"] - ref[pos]) < 1e-4
            assert 2 <= len(entry) <= 3
            assert min(v["rank"] for v in entry.values()) == 1


def test_lm_evaluation_harness_loglikelihoods_equal_pagoda_eval(stories, tmp_path):
    lm_eval = Path(sys.executable).parent / "lm_eval"
    docs = [
        {"context": "Once upon a time there was a little", "continuation": " girl"},
        {"context": "Once upon a time there was a little", "continuation": " dog named Max"},
        {"context": "Lily and Ben went to the", "continuation": " park"},
        {"context": "The sun was shining and the birds were ", "continuation": "singing."},
        {"context": "Tom wanted to play with his", "continuation": " ball, but it was lost"},
        {"context": "She was very happy.", "continuation": " The end."},
    ]
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in docs))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "pagoda_ll.yaml").write_text(f"""task: pagoda_ll
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: loglikelihood
doc_to_text: "{{{{context}}}}"
doc_to_target: "{{{{continuation}}}}"
metric_list:
  - metric: perplexity
    aggregation: perplexity
    higher_is_better: false
  - metric: acc
    aggregation: mean
    higher_is_better: true
""")
    out_dir = tmp_path / "out"
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_HOME=str(tmp_path / "hf"), OPENAI_API_KEY="unused")
    model_args = (f"model=stories,base_url={stories.base}/v1/completions,tokenizer_backend=remote,"
                  "tokenized_requests=True,num_concurrent=1,max_retries=1")
    run = subprocess.run([str(lm_eval), "--model", "local-completions", "--model_args", model_args,
                          "--tasks", "pagoda_ll", "--include_path", str(tasks), "--output_path", str(out_dir),
                          "--log_samples"], env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    samples = sorted(out_dir.rglob("samples_pagoda_ll*.jsonl"))
    assert samples, list(out_dir.rglob("*"))
    got = {}
    for line in samples[0].read_text().splitlines():
        s = json.loads(line)
        ll, greedy = s["resps"][0][0]
        got[s["doc_id"]] = (float(ll), greedy in (True, "True"))
    ref = eval_loglikelihood(tmp_path, docs)
    assert sorted(got) == list(range(len(docs)))
    for i, r in enumerate(ref):
        assert abs(got[i][0] - r["loglikelihood"]) < 1e-3, (i, got[i], r["loglikelihood"])
        assert got[i][1] == r["is_greedy"], i
        assert r["loglikelihood"] < 0


# ---- /tokenize, errors ----

def test_tokenize_with_tools_counts_what_chat_runs(tools_server):
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    tok = post(tools_server, "/tokenize", {"model": "stories", "messages": messages, "tools": TOOLS}).json()
    plain = post(tools_server, "/tokenize", {"messages": messages}).json()
    assert tok["count"] > plain["count"] + 100  # the tool signatures are in the prompt
    r = client(tools_server).chat.completions.create(model="stories", messages=messages, tools=TOOLS, max_tokens=2,
                                                     temperature=0)
    assert r.usage.prompt_tokens == tok["count"]


def test_unknown_model_is_404_model_not_found(stories):
    c = client(stories)
    for call in (lambda: c.completions.create(model="nope", prompt="Once", max_tokens=2),
                 lambda: c.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])):
        with pytest.raises(openai.NotFoundError) as e:
            call()
        err = e.value.body
        assert e.value.status_code == 404
        assert err["code"] == "model_not_found" and err["type"] == "NotFoundError" and err["param"] == "model"
        assert "`nope`" in err["message"] and '"nope"' not in err["message"]
    r = post(stories, "/tokenize", {"model": "nope", "prompt": "Once"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    assert '"nope"' not in r.json()["error"]["message"]


# ---- tool calls ----

def test_tool_choice_auto_returns_unparsable_text_unchanged(tools_server):
    """stories260K does not write tool calls: its text comes back as content, streamed or not."""
    c = client(tools_server)
    messages = [{"role": "user", "content": "Once upon a time"}]
    for choice in ("auto", "required", {"type": "function", "function": {"name": "get_weather"}}):
        r = c.chat.completions.create(model="stories", messages=messages, tools=TOOLS, tool_choice=choice,
                                      max_tokens=12, temperature=0)
        assert not r.choices[0].message.tool_calls
        assert r.choices[0].finish_reason in ("stop", "length")
        text = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
            model="stories", messages=messages, tools=TOOLS, tool_choice=choice, max_tokens=12, temperature=0,
            stream=True) if ch.choices)
        assert text == r.choices[0].message.content and text


def test_tool_choice_errors_are_400(stories, tools_server):
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.BadRequestError) as e:  # no --tool-call-parser on this server
        client(stories).chat.completions.create(model="stories", messages=messages, tools=TOOLS, tool_choice="auto")
    assert "--tool-call-parser" in str(e.value)
    with pytest.raises(openai.BadRequestError):
        client(tools_server).chat.completions.create(
            model="stories", messages=messages, tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "not_a_tool"}})


def test_unknown_tool_call_parser_fails_at_start():
    run = subprocess.run([str(BINARY), "serve", *stories_args(), "--port", "0", "--tool-call-parser", "nope"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and "hermes" in run.stderr
