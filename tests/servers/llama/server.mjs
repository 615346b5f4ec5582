// A local Anthropic Messages API over a real GGUF model (node-llama-cpp, CPU, one thread).
//
//   node server.mjs --model PATH [--port 0] [--context-size 8192] [--threads 1] [--max-tokens-cap 2048] [--seed 1]
//
// Prints `listening on http://127.0.0.1:PORT` on stdout once the model is loaded.
//
// What it does, and how it differs from the real API (the tests rely on each point):
// * POST /v1/messages, streaming (SSE: message_start, ping while the model thinks, content
//   blocks, message_delta with usage, message_stop) and not streaming; POST
//   /v1/messages/count_tokens; GET /health.
// * When the request has tools, every reply is grammar-constrained to ONE JSON object:
//   {"tool": <a tool's name>, "input": <that tool's input schema>} (served as a tool_use
//   block, stop_reason "tool_use") or {"answer": "<text>"} (a text block, "end_turn").
//   Small models do not emit their own tool-call format reliably; the grammar makes every
//   call well-formed, and says nothing about whether the call is sensible.
//   Without tools, the reply is free text (nothing constrains it).
// * The tools, the request's system prompt and the reply format are rendered into the
//   model's own chat template as a system message; tool results become user turns.
// * One request at a time (a queue), one context sequence reused across requests: a prompt
//   that shares a prefix with the previous one only evaluates the new tokens. usage reports
//   the newly evaluated prompt tokens as input_tokens and the reused ones as
//   cache_read_input_tokens.
// * Temperature 0 by default (deterministic); a request's `temperature` is honoured, sampled with a seed made of
//   `--seed` (1 by default; node-llama-cpp's own default is the clock) and a hash of the rendered prompt: the same
//   request gives the same reply (a run is reproducible), and the turns of a conversation do not all draw the same
//   random numbers (one seed for every turn made the 1.5B's sampled calls as alike as its greedy ones).
// * A reply that runs to max_tokens is served as the raw text with stop_reason "max_tokens".
// * One JSON line per reply on stderr: tokens, seconds, the raw reply (2,000 characters at most) and
//   the newest user turn it answered (`last_input`, its last 1,500 characters).
import http from "node:http";
import {getLlama, LlamaChat, LlamaGrammar, LlamaLogLevel, LlamaText} from "node-llama-cpp";
// Not exported by the package; the version is pinned in package-lock.json.
import {getGbnfGrammarForGbnfJsonSchema} from "./node_modules/node-llama-cpp/dist/utils/gbnfJson/getGbnfGrammarForGbnfJsonSchema.js";

function parseArgs(argv) {
    const args = {port: 0, contextSize: 8192, threads: 1, maxTokensCap: 2048, seed: 1, model: null};
    for (let i = 0; i < argv.length; i++) {
        const key = argv[i], value = argv[i + 1];
        if (key === "--model") args.model = value;
        else if (key === "--port") args.port = Number(value);
        else if (key === "--context-size") args.contextSize = Number(value);
        else if (key === "--threads") args.threads = Number(value);
        else if (key === "--max-tokens-cap") args.maxTokensCap = Number(value);
        else if (key === "--seed") args.seed = Number(value);
        else throw new Error(`unknown argument ${key}`);
        i++;
    }
    if (!args.model) throw new Error("--model PATH is required");
    return args;
}

const args = parseArgs(process.argv.slice(2));
const llama = await getLlama({
    gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true, progressLogs: false,
    maxThreads: args.threads, logLevel: LlamaLogLevel.error,
});
const model = await llama.loadModel({modelPath: args.model, gpuLayers: 0});
const context = await model.createContext({contextSize: Math.min(args.contextSize, model.trainContextSize), sequences: 1,
    threads: args.threads});
const sequence = context.getSequence();
const chat = new LlamaChat({contextSequence: sequence, autoDisposeSequence: false});

// ---- rendering the request for the model ---------------------------------------------------

const SUPPORTED = new Set(["type", "properties", "required", "items", "enum", "const", "oneOf", "description",
    "additionalProperties", "minItems", "maxItems", "minLength", "maxLength", "prefixItems"]);

// The subset of JSON Schema the grammar builder understands; anything else is dropped
// (anyOf becomes oneOf, an untyped schema becomes "any JSON value").
function sanitize(schema) {
    if (schema === true || schema == null || typeof schema !== "object") return {};
    const out = {};
    for (const [key, value] of Object.entries(schema)) {
        if (key === "anyOf" && Array.isArray(value)) out.oneOf = value.map(sanitize);
        else if (!SUPPORTED.has(key)) continue;
        else if (key === "properties") out.properties = Object.fromEntries(Object.entries(value).map(([k, v]) => [k, sanitize(v)]));
        else if (key === "items" || (key === "additionalProperties" && typeof value === "object")) out[key] = sanitize(value);
        else if (key === "oneOf" || key === "prefixItems") out[key] = value.map(sanitize);
        else if (key === "type" && Array.isArray(value)) out.type = value.filter(t => t !== "object" && t !== "array");
        else out[key] = value;
    }
    if (Array.isArray(out.required) && out.properties)
        out.required = out.required.filter(k => k in out.properties);
    if (out.type === "object" && !out.properties) out.additionalProperties = out.additionalProperties ?? true;
    if (Array.isArray(out.type) && out.type.length === 0) delete out.type;
    if (!("type" in out) && !("oneOf" in out) && !("enum" in out) && !("const" in out))
        return {type: ["string", "number", "boolean", "null"]};  // any scalar: the grammar needs a type
    return out;
}

function replySchema(tools) {
    return {
        oneOf: [
            ...tools.map(t => ({
                type: "object",
                properties: {tool: {const: t.name}, input: sanitize(t.input_schema ?? {type: "object"})},
                required: ["tool", "input"],
            })),
            {type: "object", properties: {answer: {type: "string"}}, required: ["answer"]},
        ],
    };
}

function systemText(system) {
    if (system == null) return "";
    if (typeof system === "string") return system;
    return system.filter(b => b.type === "text").map(b => b.text).join("\n\n");
}

function toolsText(tools) {
    const lines = tools.map(t => `- ${t.name}: ${t.description ?? ""}\n  input schema: ${JSON.stringify(t.input_schema ?? {})}`);
    return "\n\n# Tools\n" + lines.join("\n") +
        "\n\n# How to reply\nReply with exactly one JSON object and nothing else.\n" +
        "To call a tool: {\"tool\": \"<tool name>\", \"input\": {<the tool's input>}}\n" +
        "The result comes back in the next message. Work with the tools, one call per reply, until the task is done.\n" +
        "Only when all of it is done, reply: {\"answer\": \"<a short summary of what you did>\"}";
}

function blockText(content) {
    if (typeof content === "string") return content;
    if (!Array.isArray(content)) return "";
    return content.map(b => b.type === "text" ? b.text : "").join("\n");
}

const rawCalls = new Map();  // tool_use id -> the exact text the model generated (keeps the cached prefix)

function history(body, tools) {
    const items = [];
    const system = systemText(body.system) + (tools.length ? toolsText(tools) : "");
    if (system) items.push({type: "system", text: system});
    const toolNames = new Map();
    for (const message of body.messages ?? []) {
        const blocks = typeof message.content === "string" ? [{type: "text", text: message.content}] : message.content ?? [];
        if (message.role === "assistant") {
            const parts = blocks.map(b => {
                if (b.type === "tool_use") {
                    toolNames.set(b.id, b.name);
                    return rawCalls.get(b.id) ?? JSON.stringify({tool: b.name, input: b.input});
                }
                if (b.type === "text") return tools.length ? JSON.stringify({answer: b.text}) : b.text;
                return "";
            }).filter(Boolean);
            items.push({type: "model", response: [parts.join("\n")]});
        } else {
            const parts = blocks.map(b => {
                if (b.type === "tool_result") {
                    const name = toolNames.get(b.tool_use_id) ?? "tool";
                    return `Result of ${name}${b.is_error ? " (FAILED)" : ""}:\n${blockText(b.content)}`;
                }
                if (b.type === "text") return b.text;
                return "";
            }).filter(Boolean);
            const text = parts.join("\n\n");
            const last = items[items.length - 1];
            if (last?.type === "user") last.text += "\n\n" + text;
            else items.push({type: "user", text});
        }
    }
    return items;
}

// JSON on one line: the library's default pretty-prints with 4-space indents, which costs a
// small model many tokens per call for nothing.
class CompactJsonGrammar extends LlamaGrammar {
    constructor(schema) {
        super(llama, {grammar: getGbnfGrammarForGbnfJsonSchema(schema, {allowNewLines: false}),
            stopGenerationTriggers: [LlamaText(["\n".repeat(4)])], trimWhitespaceSuffix: true});
    }
    parse(text) {
        return JSON.parse(text);
    }
}

const grammars = new Map();
async function grammarFor(tools) {
    const key = JSON.stringify(tools.map(t => [t.name, t.input_schema]));
    if (!grammars.has(key)) grammars.set(key, new CompactJsonGrammar(replySchema(tools)));
    return grammars.get(key);
}

// ---- generating ---------------------------------------------------------------------------

let nextId = 1;
const newId = prefix => `${prefix}_${String(nextId++).padStart(6, "0")}${Date.now().toString(36)}`;

let queue = Promise.resolve();
function serialized(task) {
    const run = queue.then(task, task);
    queue = run.catch(() => undefined);
    return run;
}

class ApiError extends Error {
    constructor(status, type, message) {
        super(message);
        this.status = status;
        this.type = type;
    }
}

function promptTokenCount(items) {
    const state = chat.chatWrapper.generateContextState({chatHistory: items});
    return state.contextText.tokenize(model.tokenizer).length;
}

// The newest user turn (a tool's result, or the prompt): logged with each reply, so a failed test can print every call.
function lastInput(items) {
    const last = items[items.length - 1];
    return last?.type === "user" ? last.text : "";
}

// FNV-1a of the rendered conversation, mixed with --seed: reproducible, and different from turn to turn.
function promptSeed(items) {
    let hash = 2166136261 ^ args.seed;
    const text = JSON.stringify(items);
    for (let i = 0; i < text.length; i++) hash = Math.imul(hash ^ text.charCodeAt(i), 16777619);
    return hash >>> 0;
}

async function generate(body, signal) {
    const tools = Array.isArray(body.tools) ? body.tools : [];
    const items = history(body, tools);
    // As the real API does: a prompt the context cannot hold is a 400, never silently truncated.
    const needed = promptTokenCount(items);
    if (needed >= context.contextSize)
        throw new ApiError(400, "invalid_request_error", `prompt is too long: ${needed} tokens > ${context.contextSize - 1} maximum`);
    const grammar = tools.length ? await grammarFor(tools) : undefined;
    const maxTokens = Math.max(1, Math.min(Number(body.max_tokens) || 1024, args.maxTokensCap, context.contextSize - needed));
    const seed = promptSeed(items);
    const meter = sequence.tokenMeter.getState();
    const started = Date.now();
    const result = await chat.generateResponse(items, {
        grammar, maxTokens, signal, stopOnAbortSignal: true,
        temperature: typeof body.temperature === "number" ? body.temperature : 0, seed,
    });
    const diff = sequence.tokenMeter.diff(meter);
    const outputTokens = diff.usedOutputTokens;
    const promptTokens = Math.max(0, sequence.nextTokenIndex - outputTokens);
    const evaluated = Math.min(diff.usedInputTokens, promptTokens);
    const usage = {input_tokens: evaluated, output_tokens: outputTokens, cache_read_input_tokens: promptTokens - evaluated,
        cache_creation_input_tokens: 0};
    const raw = result.response;
    const stop = result.metadata.stopReason;
    let blocks, stopReason;
    if (stop === "maxTokens") {
        blocks = [{type: "text", text: raw}];
        stopReason = "max_tokens";
    } else if (grammar) {
        const parsed = grammar.parse(raw);
        if ("tool" in parsed) {
            const id = newId("toolu");
            rawCalls.set(id, raw);
            blocks = [{type: "tool_use", id, name: parsed.tool, input: parsed.input ?? {}}];
            stopReason = "tool_use";
        } else {
            blocks = [{type: "text", text: parsed.answer}];
            stopReason = "end_turn";
        }
    } else {
        blocks = [{type: "text", text: raw}];
        stopReason = "end_turn";
    }
    // One JSON line per request on stderr: what the tests and the docs' table read.
    process.stderr.write(JSON.stringify({event: "reply", stop_reason: stopReason, prompt_tokens: promptTokens,
        new_prompt_tokens: evaluated, output_tokens: outputTokens, seconds: (Date.now() - started) / 1000,
        temperature: typeof body.temperature === "number" ? body.temperature : 0, seed,
        tool: blocks[0]?.name ?? null, raw: raw.slice(0, 2000), last_input: lastInput(items).slice(-1500)}) + "\n");
    return {blocks, stopReason, usage};
}

// ---- HTTP ---------------------------------------------------------------------------------

function sendJson(res, status, payload) {
    const data = JSON.stringify(payload);
    res.writeHead(status, {"content-type": "application/json", "content-length": Buffer.byteLength(data),
        "request-id": newId("req")});
    res.end(data);
}

function apiError(res, status, type, message) {
    sendJson(res, status, {type: "error", error: {type, message}});
}

function messageShell(body, usage) {
    return {id: newId("msg"), type: "message", role: "assistant", model: body.model ?? "local", content: [],
        stop_reason: null, stop_sequence: null, usage};
}

function sse(res, event, data) {
    res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
}

async function messages(req, res, body) {
    if (!Array.isArray(body.messages) || body.messages.length === 0)
        return apiError(res, 400, "invalid_request_error", "messages: at least one message is required");
    const abort = new AbortController();
    res.on("close", () => { if (!res.writableFinished) abort.abort(); });
    if (!body.stream) {
        const out = await serialized(() => generate(body, abort.signal));
        const msg = messageShell(body, out.usage);
        return sendJson(res, 200, {...msg, content: out.blocks, stop_reason: out.stopReason});
    }
    res.writeHead(200, {"content-type": "text/event-stream", "cache-control": "no-cache", "request-id": newId("req")});
    const shell = messageShell(body, {input_tokens: 0, output_tokens: 0});
    sse(res, "message_start", {type: "message_start", message: shell});
    const ping = setInterval(() => sse(res, "ping", {type: "ping"}), 5000);
    let out;
    try {
        out = await serialized(() => generate(body, abort.signal));
    } finally {
        clearInterval(ping);
    }
    if (abort.signal.aborted) return res.end();
    out.blocks.forEach((block, index) => {
        if (block.type === "text") {
            sse(res, "content_block_start", {type: "content_block_start", index, content_block: {type: "text", text: ""}});
            sse(res, "content_block_delta", {type: "content_block_delta", index, delta: {type: "text_delta", text: block.text}});
        } else {
            sse(res, "content_block_start", {type: "content_block_start", index,
                content_block: {type: "tool_use", id: block.id, name: block.name, input: {}}});
            sse(res, "content_block_delta", {type: "content_block_delta", index,
                delta: {type: "input_json_delta", partial_json: JSON.stringify(block.input)}});
        }
        sse(res, "content_block_stop", {type: "content_block_stop", index});
    });
    sse(res, "message_delta", {type: "message_delta", delta: {stop_reason: out.stopReason, stop_sequence: null}, usage: out.usage});
    sse(res, "message_stop", {type: "message_stop"});
    res.end();
}

async function countTokens(res, body) {
    const tools = Array.isArray(body.tools) ? body.tools : [];
    sendJson(res, 200, {input_tokens: promptTokenCount(history(body, tools))});
}

const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", c => chunks.push(c));
    req.on("end", async () => {
        const path = req.url.split("?")[0];
        try {
            if (req.method === "GET" && path === "/health")
                return sendJson(res, 200, {ok: true, model: args.model, context_size: context.contextSize});
            if (req.method !== "POST" || !path.startsWith("/v1/messages"))
                return apiError(res, 404, "not_found_error", `${req.method} ${path} is not served here`);
            let body;
            try {
                body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
            } catch {
                return apiError(res, 400, "invalid_request_error", "the body is not JSON");
            }
            if (path === "/v1/messages/count_tokens") return await countTokens(res, body);
            if (path === "/v1/messages") return await messages(req, res, body);
            return apiError(res, 404, "not_found_error", `${path} is not served here`);
        } catch (err) {
            const status = err instanceof ApiError ? err.status : 500;
            const type = err instanceof ApiError ? err.type : "api_error";
            process.stderr.write(JSON.stringify({event: "error", status, type, message: String(err?.message ?? err)}) + "\n");
            if (!res.headersSent) apiError(res, status, type, String(err?.message ?? err));
            else {  // mid-stream, as the real API does: an error event, then the end of the stream
                sse(res, "error", {type: "error", error: {type, message: String(err?.message ?? err)}});
                res.end();
            }
        }
    });
});

function shutdown() {
    setTimeout(() => process.exit(0), 2000).unref();  // a generation in progress does not hold the exit
    server.close();
    server.closeAllConnections?.();
    Promise.resolve().then(() => context.dispose()).then(() => model.dispose()).then(() => llama.dispose())
        .finally(() => process.exit(0));
}
process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);

server.listen(args.port, "127.0.0.1", () => {
    process.stdout.write(`listening on http://127.0.0.1:${server.address().port}\n`);
});
