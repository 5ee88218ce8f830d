// Streams one chat completion and one completion from burstd with the official `openai` npm
// client (greedy), asks a chat for logprobs, asks for two choices (a chat, and a streamed
// completion) and for a chat in JSON mode, and prints {"chat": ..., "completion": ..., "usage": ...,
// "logprobs": ..., "chat_n2": [...], "completion_n2": [...], "json_chat": ...} as one JSON line.
// usage: node openai_client.mjs BASE_URL API_KEY MODEL
import OpenAI from "openai";

const [baseURL, apiKey, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey, maxRetries: 0 });

async function collect(stream, pick) {
  let text = "", usage = null;
  for await (const chunk of stream) {
    text += pick(chunk.choices[0] ?? {}) ?? "";
    if (chunk.usage) usage = chunk.usage;
  }
  return { text, usage };
}

const chat = await collect(await client.chat.completions.create({
  model, messages: [{ role: "user", content: "Tell me a story" }], max_tokens: 30, temperature: 0, stream: true,
}), (c) => c.delta?.content);
const completion = await collect(await client.completions.create({
  model, prompt: "Once upon a time", max_tokens: 40, temperature: 0, stream: true,
  stream_options: { include_usage: true },
}), (c) => c.text);
const scored = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "Tell me a story" }], max_tokens: 5, temperature: 0,
  logprobs: true, top_logprobs: 3,
});
const chatN2 = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "Tell me a story" }], max_tokens: 30, temperature: 0, n: 2,
});
const completionN2 = [];
for await (const chunk of await client.completions.create({
  model, prompt: "Once upon a time", max_tokens: 40, temperature: 0, n: 2, stream: true,
})) {
  for (const c of chunk.choices) completionN2[c.index] = (completionN2[c.index] ?? "") + c.text;
}
const jsonChat = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "Tell me a story" }], max_tokens: 20, temperature: 0,
  response_format: { type: "json_object" },
});
const schemaChat = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "Tell me a story" }], max_tokens: 40, temperature: 0,
  response_format: { type: "json_schema", json_schema: { name: "story", strict: true, schema: JSON.parse(process.env.SCHEMA) } },
});
const tool = {
  model, messages: [{ role: "user", content: "Tell me a story" }], max_tokens: 40, temperature: 0,
  tools: [{ type: "function", function: { name: "story", parameters: JSON.parse(process.env.SCHEMA) } }],
  tool_choice: { type: "function", function: { name: "story" } },
};
const toolChat = await client.chat.completions.create(tool);
let toolStreamed = "";
for await (const chunk of await client.chat.completions.create({ ...tool, stream: true })) {
  for (const call of chunk.choices[0]?.delta?.tool_calls ?? []) toolStreamed += call.function?.arguments ?? "";
}
const toolAnswer = await client.chat.completions.create({ // the call sent back as the client returned it, with its result
  model, max_tokens: 20, temperature: 0,
  messages: [...tool.messages, toolChat.choices[0].message,
             { role: "tool", tool_call_id: toolChat.choices[0].message.tool_calls[0].id, content: "Lily is 3." }],
});
const required = { // calls of any of two tools: whole, and streamed through the client's own accumulating helper
  ...tool, max_tokens: 200, tools: [...tool.tools, { type: "function", function: { name: "noop" } }], tool_choice: "required",
};
const requiredChat = await client.chat.completions.create(required);
const requiredStreamed = await client.chat.completions.stream(required).finalChatCompletion();
const resultsAnswer = await client.chat.completions.create({ // the calls sent back with a result each, in a row
  model, max_tokens: 20, temperature: 0,
  messages: [...tool.messages, requiredChat.choices[0].message,
             ...requiredChat.choices[0].message.tool_calls.map((c, i) => ({ role: "tool", tool_call_id: c.id, content: `result ${i}` }))],
});
const models = await client.models.list();
const retrieved = await client.models.retrieve(model);
console.log(JSON.stringify({ chat: chat.text, completion: completion.text, usage: completion.usage,
                             logprobs: scored.choices[0].logprobs.content, models: models.data.map((m) => m.id),
                             retrieved: retrieved.id,
                             chat_n2: chatN2.choices.map((c) => c.message.content), completion_n2: completionN2,
                             json_chat: jsonChat.choices[0].message.content,
                             schema_chat: schemaChat.choices[0].message.content,
                             tool_call: toolChat.choices[0].message.tool_calls[0].function, tool_streamed: toolStreamed,
                             tool_answer: toolAnswer.choices[0].message.content,
                             required: requiredChat.choices[0].message.tool_calls.map((c) => c.function),
                             required_streamed: requiredStreamed.choices[0].message.tool_calls.map((c) => c.function),
                             results_answer: resultsAnswer.choices[0].message.content }));
