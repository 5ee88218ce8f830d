"""The official `openai` npm client (tests/package.json; `npm ci --prefix tests` installs it)
streams a chat completion and a completion from burstd, with an API key, and receives the same
text `burst generate` gives greedily, the usage it asked for, a chat's logprobs, and chats in JSON
mode and with a JSON schema as the same requests over HTTP get them, and a named function call
(whole and streamed) whose arguments are the schema's answer. Skips (77) where node or the
package is missing."""
import json
import os
import shutil
import subprocess
import sys

from burstd_util import STORIES, Burstd, Checks, generate, need_stories

need_stories()
HERE = os.path.dirname(os.path.abspath(__file__))
node = shutil.which("node")
if not node or not os.path.isdir(os.path.join(HERE, "node_modules", "openai")):
    print("skip: needs node and the openai package (npm ci --prefix tests)")
    sys.exit(77)
check = Checks()
chat_ref = generate(STORIES, "[INST] Tell me a story [/INST]", 30)
completion_ref = generate(STORIES, "Once upon a time", 40)
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "mood": {"enum": ["happy", "sad"]}},
          "required": ["name", "mood"], "additionalProperties": False}

with Burstd(STORIES, "--api-key", "test-key") as srv:
    r = subprocess.run([node, os.path.join(HERE, "openai_client.mjs"), srv.url, "test-key", "stories260K"],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "SCHEMA": json.dumps(SCHEMA)})
    out = json.loads(r.stdout) if r.returncode == 0 else {}
    check("openai client ran", r.returncode == 0, r.stderr[-800:])
    check("streamed chat = burst generate", out.get("chat") == chat_ref, (out.get("chat"), chat_ref))
    check("streamed completion = burst generate", out.get("completion") == completion_ref,
          (out.get("completion"), completion_ref))
    check("usage reaches the client", (out.get("usage") or {}).get("completion_tokens") == 40, out.get("usage"))
    lp = out.get("logprobs") or []
    check("chat logprobs reach the client: 5 tokens, 3 alternatives, the greedy one first",
          len(lp) == 5 and all(len(t["top_logprobs"]) == 3 and t["top_logprobs"][0]["token"] == t["token"]
                               and t["logprob"] <= 0 and t["bytes"] for t in lp)
          and "".join(t["token"] for t in lp) == chat_ref[:len("".join(t["token"] for t in lp))], lp)
    check("models.list", out.get("models") == ["stories260K"], out.get("models"))
    check("models.retrieve", out.get("retrieved") == "stories260K", out.get("retrieved"))
    check("n=2 chat: two choices, each = burst generate", out.get("chat_n2") == [chat_ref] * 2, out.get("chat_n2"))
    check("n=2 streamed completion: each choice's chunks = burst generate",
          out.get("completion_n2") == [completion_ref] * 2, out.get("completion_n2"))
    st, _, raw = srv.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Tell me a story"}],
                                                              "max_tokens": 20, "temperature": 0,
                                                              "response_format": {"type": "json_object"}},
                             headers={"Authorization": "Bearer test-key"})
    json_ref = raw["choices"][0]["message"]["content"] if st == 200 else None
    check("JSON mode chat: the client's answer = the same request's over HTTP, an object's beginning",
          out.get("json_chat") == json_ref and json_ref.lstrip().startswith("{"), (out.get("json_chat"), json_ref))
    st, _, raw = srv.request("POST", "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 40, "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "story", "strict": True, "schema": SCHEMA}}},
        headers={"Authorization": "Bearer test-key"})
    schema_ref = raw["choices"][0]["message"]["content"] if st == 200 else None
    check("chat with a JSON schema: the client's answer = the same request's over HTTP, an instance",
          out.get("schema_chat") == schema_ref and raw["choices"][0]["finish_reason"] == "stop"
          and set(json.loads(schema_ref)) == {"name", "mood"}, (out.get("schema_chat"), raw))
    check("a named function call reaches the client, whole and streamed: arguments = the schema's answer",
          out.get("tool_call") == {"name": "story", "arguments": schema_ref} and out.get("tool_streamed") == schema_ref,
          (out.get("tool_call"), out.get("tool_streamed")))
    st, _, raw = srv.request("POST", "/v1/chat/completions", {"max_tokens": 20, "temperature": 0, "messages": [
        {"role": "user", "content": "Tell me a story"}, {"role": "assistant", "content": schema_ref},
        {"role": "user", "content": "Lily is 3."}]}, headers={"Authorization": "Bearer test-key"})
    check("the call sent back by the client with its result: answered as the arguments and a user turn in text",
          st == 200 and out.get("tool_answer") == raw["choices"][0]["message"]["content"], (out.get("tool_answer"), raw))
    st, _, raw = srv.request("POST", "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 200, "temperature": 0,
        "tools": [{"type": "function", "function": {"name": "story", "parameters": SCHEMA}},
                  {"type": "function", "function": {"name": "noop"}}], "tool_choice": "required"},
        headers={"Authorization": "Bearer test-key"})
    calls = [c["function"] for c in raw["choices"][0]["message"].get("tool_calls", [])] if st == 200 else None
    check("'required' calls reach the client, whole and through its stream helper, as over HTTP",
          calls and len(calls) >= 2 and out.get("required") == calls and out.get("required_streamed") == calls, (out.get("required"), calls))
    st, _, raw = srv.request("POST", "/v1/chat/completions", {"max_tokens": 20, "temperature": 0, "messages": [
        {"role": "user", "content": "Tell me a story"}, {"role": "assistant", "content": "\n".join(c["arguments"] for c in calls)},
        {"role": "user", "content": "\n".join(f"result {i}" for i in range(len(calls)))}]}, headers={"Authorization": "Bearer test-key"})
    check("the calls sent back by the client with their results in a row: answered as one user turn",
          st == 200 and out.get("results_answer") == raw["choices"][0]["message"]["content"], (out.get("results_answer"), raw))
check.exit()
