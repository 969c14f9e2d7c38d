"""The JavaScript SDK's integer checks (issue 66, part 5), run by plain Node.js on the SDK's own modules with the WIT
imports stubbed by a loader hook that records what would reach the host: every integer out of its WIT type's range
(u32, u8, u64, s64, u16) throws the SDK's error naming the field, before any host call, and the largest value in
range reaches the host unchanged. componentize-js's bindings wrap an out-of-range Number and trap on an out-of-range
BigInt (tests/integration/test_js_sdk_ranges.py shows both in a real guest), so these checks are the only ones."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

SDK = Path(__file__).resolve().parents[2] / "host" / "llmhost" / "guest_sdk_js" / "llmhost"
NODE_TIMEOUT_S = 30

# Resolves the WIT interfaces ("llmhost:...", "wasi:...") to one stub module that records each call's arguments.
LOADER = """
const STUB = `
export const calls = globalThis.__calls ??= [];
const record = (name) => (...args) => { calls.push([name, args]); return undefined; };
export function defaultParams(model) {
  calls.push(["defaultParams", [model]]);
  return { maxTokens: 100, repeatPenalty: 1.1, repeatPenaltyLastNTokenCount: 64, stop: [], temperature: 0.8, topK: 40,
    topP: 0.9, seed: undefined, logprobs: undefined, frequencyPenalty: 0, presencePenalty: 0, logitBias: [] };
}
export function infer(model, prompt, params) {
  calls.push(["infer", [model, prompt, params]]);
  return { text: "", finishReason: "length", usage: { promptTokenCount: 1, generatedTokenCount: 0 }, logprobs: [] };
}
export function open(name) { calls.push(["open", [name]]); return { name }; }
export function increment(bucket, key, delta) { calls.push(["increment", [key, delta]]); return delta; }
export const inferStream = record("inferStream"), chat = record("chat"), chatStream = record("chatStream");
export const applyChatTemplate = record("applyChatTemplate"), tokenize = record("tokenize");
export const getModelInfo = record("getModelInfo"), getModelKind = record("getModelKind");
export const listModels = record("listModels"), generateEmbeddings = record("generateEmbeddings");
export const send = record("send"), get = record("get"), getAll = record("getAll");
`;
export async function resolve(specifier, context, next) {
  if (!/^(llmhost|wasi):/.test(specifier)) return next(specifier, context);
  return { url: "data:text/javascript," + encodeURIComponent(STUB), shortCircuit: true };
}
"""

# Each case: [name, what it calls]; the output: name -> {type, kind, message, calls} (the host calls it made).
SCRIPT = """
import { register } from "node:module";
register(process.argv[2]);
const sdk = await import(process.argv[3] + "/index.js");
const { llm, kv, http } = sdk;
const store = () => kv.open("default");
const cases = {
  maxTokens: () => llm.infer("hi", { maxTokens: 2 ** 32 + 3 }),
  "maxTokens-negative": () => llm.infer("hi", { maxTokens: -1 }),
  "maxTokens-fraction": () => llm.infer("hi", { maxTokens: 1.5 }),
  "maxTokens-bigint": () => llm.infer("hi", { maxTokens: 2n ** 32n }),
  topK: () => llm.infer("hi", { topK: 2 ** 32 }),
  repeatPenaltyLastNTokenCount: () => llm.infer("hi", { repeatPenaltyLastNTokenCount: 2 ** 40 }),
  seed: () => llm.infer("hi", { seed: 2n ** 64n }),
  "seed-negative": () => llm.infer("hi", { seed: -1 }),
  "seed-fraction": () => llm.infer("hi", { seed: 0.5 }),
  logprobs: () => llm.infer("hi", { logprobs: 258 }),
  logitBias: () => llm.infer("hi", { logitBias: { [2 ** 32 + 1]: 5.0 } }),
  "logitBias-map": () => llm.infer("hi", { logitBias: new Map([[-1, 1.0]]) }),
  "logitBias-empty-key": () => llm.infer("hi", { logitBias: new Map([["", 1.0]]) }),
  "kv-increment": () => store().increment("k", 2n ** 63n),
  "kv-increment-low": () => store().increment("k", -(2n ** 63n) - 1n),
  "kv-increment-number": () => store().increment("k", 2 ** 64),
  "kv-increment-fraction": () => store().increment("k", 0.5),
  "http-status": () => http.respond(null, 65536 + 200, {}, "x"),
  // In range: reaches the host as given.
  "in-range": () => llm.infer("hi", {
    maxTokens: 2 ** 32 - 1, topK: "7", seed: 2n ** 64n - 1n, logprobs: 255, logitBias: { 4294967295: 1.5 },
  }),
  "kv-in-range": () => store().increment("k", 2n ** 63n - 1n),
};
const out = {};
for (const [name, action] of Object.entries(cases)) {
  globalThis.__calls.length = 0;
  let error = null;
  try { action(); } catch (e) { error = e; }
  const calls = globalThis.__calls.filter(([n]) => n !== "defaultParams" && n !== "open");
  out[name] = {
    type: error?.name ?? null, kind: error?.kind ?? null, message: error?.message ?? null,
    calls: JSON.parse(JSON.stringify(calls, (k, v) => (typeof v === "bigint" ? `${v}n` : v))),
  };
}
console.log(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed")
    work = tmp_path_factory.mktemp("js-ints")
    (work / "loader.mjs").write_text(LOADER)
    (work / "check.mjs").write_text(SCRIPT)
    done = subprocess.run(
        [node, str(work / "check.mjs"), (work / "loader.mjs").as_uri(), SDK.as_uri()],
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


LLM_FIELDS = {
    "maxTokens": "maxTokens",
    "maxTokens-negative": "maxTokens",
    "maxTokens-fraction": "maxTokens",
    "maxTokens-bigint": "maxTokens",
    "topK": "topK",
    "repeatPenaltyLastNTokenCount": "repeatPenaltyLastNTokenCount",
    "seed": "seed",
    "seed-negative": "seed",
    "seed-fraction": "seed",
    "logprobs": "logprobs",
    "logitBias": "logitBias token id",
    "logitBias-map": "logitBias token id",
    "logitBias-empty-key": "logitBias token id",
}


@pytest.mark.parametrize("case", sorted(LLM_FIELDS))
def test_an_out_of_range_option_is_invalid_input_naming_it_before_any_host_call(
    results: dict[str, Any], case: str
) -> None:
    got = results[case]
    assert got["type"] == "InvalidInput" and got["kind"] == "invalid-input", got
    assert got["message"].startswith(LLM_FIELDS[case]) and "must be an integer from 0 to" in got["message"]
    assert got["calls"] == []  # nothing reached the host


def test_the_ranges_are_the_wit_types(results: dict[str, Any]) -> None:
    assert "from 0 to 4294967295, not 4294967299" in results["maxTokens"]["message"]  # u32
    assert "from 0 to 255, not 258" in results["logprobs"]["message"]  # u8
    assert "from 0 to 18446744073709551615, not 18446744073709551616n" in results["seed"]["message"]  # u64


@pytest.mark.parametrize("case", ["kv-increment", "kv-increment-low", "kv-increment-number", "kv-increment-fraction"])
def test_an_out_of_range_increment_is_a_kv_error_naming_delta(results: dict[str, Any], case: str) -> None:
    got = results[case]
    assert got["type"] == "KvError" and got["kind"] == "other", got
    assert got["message"].startswith(
        "invalid delta must be an integer from -9223372036854775808 to 9223372036854775807"
    )
    assert got["calls"] == []


def test_an_out_of_range_response_status_is_refused(results: dict[str, Any]) -> None:
    got = results["http-status"]
    assert got["type"] == "RangeError" and got["message"] == "status must be an integer from 0 to 65535, not 65736"


def test_the_largest_values_in_range_reach_the_host_unchanged(results: dict[str, Any]) -> None:
    [[name, [_, _, params]]] = results["in-range"]["calls"]
    assert name == "infer" and results["in-range"]["type"] is None
    assert params["maxTokens"] == 2**32 - 1 and params["topK"] == 7 and params["logprobs"] == 255
    assert params["seed"] == f"{2**64 - 1}n" and params["logitBias"] == [{"tokenId": 2**32 - 1, "bias": 1.5}]
    assert results["kv-in-range"]["calls"] == [["increment", ["k", f"{2**63 - 1}n"]]]
