// Drives a real `plumb serve` with the official openai npm client:
// model listing, completions, chat (plain and streamed), errors, and
// concurrent requests. Needs ../shared/models/stories260K.gguf (skips
// otherwise) and the plumb binary (PLUMB_BIN, default ../../plumb).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';

const root = path.resolve(import.meta.dirname, '../..');
const shared = process.env.PLUMB_SHARED || path.resolve(root, '../shared');
const model = path.join(shared, 'models/stories260K.gguf');
const bin = process.env.PLUMB_BIN ? path.resolve(root, process.env.PLUMB_BIN) : path.join(root, 'plumb');
const port = 30000 + (process.pid % 20000);
const have = existsSync(model);
const skip = have ? false : `needs ${model} (shared test data is absent)`;
let server;
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'sk-test', maxRetries: 0, timeout: 60000 });

before(async () => {
  if (!have) return;
  server = spawn(bin, ['serve', '-m', model, '--port', String(port), '--parallel', '4', '-c', '4096',
                      '--chat-template', 'chatml', '--api-key', 'sk-test'], { stdio: ['ignore', 'ignore', 'inherit'] });
  for (let i = 0; i < 200; i++) {
    try { if ((await fetch(`http://127.0.0.1:${port}/health`)).status === 200) return; } catch {}
    await new Promise(r => setTimeout(r, 50));
  }
  throw new Error('server did not start');
});

after(() => { if (server) server.kill('SIGTERM'); });

test('models.list', { skip }, async () => {
  const page = await client.models.list();
  assert.deepEqual(page.data.map(m => m.id), ['stories260K']);
});

test('completions.create reproduces the reference greedy text', { skip }, async () => {
  const r = await client.completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 30, temperature: 0 });
  const ref = readFileSync(path.join(shared, 'reference/stories260K.greedy.once-upon-a-time.txt'), 'utf8');
  assert.ok(ref.startsWith('Once upon a time' + r.choices[0].text), r.choices[0].text);
  assert.equal(r.usage.prompt_tokens, 5);
  assert.equal(r.usage.completion_tokens, 30);
  assert.equal(r.choices[0].finish_reason, 'length');
});

test('chat.completions.create, plain and streamed, agree', { skip }, async () => {
  const messages = [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: 'Tell me about a dog.' }];
  const plain = await client.chat.completions.create({ model: 'stories260K', messages, max_tokens: 24, temperature: 0 });
  assert.equal(plain.object, 'chat.completion');
  assert.equal(plain.choices[0].message.role, 'assistant');
  const stream = await client.chat.completions.create({ model: 'stories260K', messages, max_tokens: 24, temperature: 0, stream: true,
                                                        stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta?.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, plain.choices[0].message.content);
  assert.equal(finish, plain.choices[0].finish_reason);
  assert.equal(usage.completion_tokens, plain.usage.completion_tokens);
});

test('errors come back as OpenAI errors', { skip }, async () => {
  await assert.rejects(client.completions.create({ model: 'gpt-4o', prompt: 'x', max_tokens: 1 }),
                       e => e instanceof OpenAI.NotFoundError && e.status === 404);
  await assert.rejects(client.completions.create({ model: 'stories260K', prompt: 'x', max_tokens: 1, temperature: 7 }),
                       e => e instanceof OpenAI.BadRequestError && /temperature/.test(e.message));
  const noKey = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(noKey.models.list(), e => e instanceof OpenAI.AuthenticationError && e.status === 401);
});

test('eight concurrent greedy requests equal sequential ones', { skip }, async () => {
  const prompts = ['Once upon a time', 'The cat', 'Tom had a', 'One day', 'The sky', 'Lily saw', 'A big dog', 'They went'];
  const ask = p => client.completions.create({ model: 'stories260K', prompt: p, max_tokens: 32, temperature: 0 }).then(r => r.choices[0].text);
  const sequential = [];
  for (const p of prompts) sequential.push(await ask(p));
  const parallel = await Promise.all(prompts.map(ask));
  assert.deepEqual(parallel, sequential);
});
