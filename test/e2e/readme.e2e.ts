import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';
import { parseConfig } from '@cortex/config';
import { FIXTURE_CATALOGUE, runCli, startStack, type TestStack } from '@cortex/testing';

// The README is read at test time: every shell block's commands and every request it shows are
// checked here, so an edit that breaks one (or a product change that breaks the README) fails.

const ROOT = resolve(fileURLToPath(new URL('../../..', import.meta.url)));
const README = readFileSync(join(ROOT, 'README.md'), 'utf8');
/** Where the README's requests go: the gateway `npm start` listens on (config/cortex.yaml). */
const README_BASE = 'http://127.0.0.1:31313';

interface StartConfig {
  gateway: { listen: string };
  models: Array<{ id: string }>;
}
const startConfig = parseYaml(readFileSync(join(ROOT, 'config/cortex.yaml'), 'utf8')) as StartConfig;
const packageJson = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };

/** The bodies of the README's ```sh blocks. */
function shellBlocks(markdown: string): string[] {
  return [...markdown.matchAll(/^```(?:sh|bash|shell)\n([\s\S]*?)^```$/gm)].map((match) => match[1]!);
}

/**
 * Splits a shell block into its words, command by command, as a POSIX shell would: quotes, a
 * backslash before a newline, and `#` comments outside quotes. A quote left open is an error.
 */
function shellCommands(block: string): string[][] {
  const commands: string[][] = [];
  let words: string[] = [];
  let word: string | null = null;
  let quote: "'" | '"' | null = null;
  const endWord = (): void => {
    if (word !== null) words.push(word);
    word = null;
  };
  const endCommand = (): void => {
    endWord();
    if (words.length > 0) commands.push(words);
    words = [];
  };
  for (let i = 0; i < block.length; i++) {
    const c = block[i]!;
    if (quote === "'") {
      if (c === "'") quote = null;
      else word = (word ?? '') + c;
    } else if (quote === '"') {
      if (c === '"') quote = null;
      else if (c === '\\' && '"\\$`'.includes(block[i + 1] ?? '')) word = (word ?? '') + (block[++i] ?? '');
      else word = (word ?? '') + c;
    } else if (c === "'" || c === '"') {
      quote = c;
      word ??= '';
    } else if (c === '\\' && block[i + 1] === '\n') {
      i++;
    } else if (c === '\\') {
      word = (word ?? '') + (block[++i] ?? '');
    } else if (c === '#' && word === null) {
      while (i < block.length && block[i] !== '\n') i++;
      endCommand();
    } else if (c === '\n' || c === ';' || c === '&') {
      endCommand();
    } else if (c === ' ' || c === '\t') {
      endWord();
    } else {
      word = (word ?? '') + c;
    }
  }
  assert.equal(quote, null, `a quote is left open in the README's block:\n${block}`);
  endCommand();
  return commands;
}

interface CurlRequest {
  /** The command as the README writes it, for messages. */
  shown: string;
  url: URL;
  headers: Record<string, string>;
  body: Record<string, unknown> | null;
  /** The curl options as written, with the URL rewritten to the stack's gateway. */
  args: string[];
}

/** A README curl command, read option by option; an option the test does not know fails it. */
function parseCurl(words: string[], baseUrl: string): CurlRequest {
  const shown = words.join(' ');
  const args: string[] = [];
  const headers: Record<string, string> = {};
  let url: URL | null = null;
  let body: Record<string, unknown> | null = null;
  for (let i = 1; i < words.length; i++) {
    const word = words[i]!;
    if (/^-[sN]+$/.test(word)) {
      args.push(word);
    } else if (word === '-H' || word === '-d') {
      const value = words[++i];
      assert.ok(value !== undefined, `${word} without a value in: ${shown}`);
      if (word === '-H') {
        const colon = value.indexOf(':');
        assert.ok(colon > 0, `a header without a name in: ${shown}`);
        headers[value.slice(0, colon).trim().toLowerCase()] = value.slice(colon + 1).trim();
      } else {
        body = JSON.parse(value) as Record<string, unknown>; // a body that is not JSON fails here
      }
      args.push(word, value);
    } else if (word.startsWith('http')) {
      assert.ok(word.startsWith(`${README_BASE}/`), `the README's requests go to ${README_BASE}: ${shown}`);
      url = new URL(word.replace(README_BASE, baseUrl));
      args.push(url.href);
    } else {
      assert.fail(`an option this test does not read (${word}) in: ${shown}`);
    }
  }
  assert.ok(url, `no URL in: ${shown}`);
  return { shown, url, headers, body, args };
}

/** Sends the request with curl itself when it is installed (as a reader would), else with fetch. */
async function send(request: CurlRequest): Promise<{ status: number; text: string }> {
  if (spawnSync('curl', ['--version']).status === 0) {
    const marker = '\n--status ';
    const run = spawnSync('curl', [...request.args, '--max-time', '60', '--write-out', `${marker}%{http_code}`], {
      encoding: 'utf8',
    });
    assert.equal(run.status, 0, `curl failed (${run.status}): ${run.stderr}\n${request.shown}`);
    const at = run.stdout.lastIndexOf(marker);
    return { status: Number(run.stdout.slice(at + marker.length)), text: run.stdout.slice(0, at) };
  }
  const response = await fetch(request.url, {
    method: request.body ? 'POST' : 'GET',
    headers: request.headers,
    body: request.body ? JSON.stringify(request.body) : undefined,
    signal: AbortSignal.timeout(60_000),
  });
  return { status: response.status, text: await response.text() };
}

/** The `data:` payloads of a server-sent event stream, in order. */
function sseData(text: string): string[] {
  return text
    .split('\n')
    .filter((line) => line.startsWith('data:'))
    .map((line) => line.slice(5).trim());
}

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const nonEmptyText = (value: unknown, what: string): void => {
  assert.equal(typeof value, 'string', `${what} is not text: ${JSON.stringify(value)}`);
  assert.ok((value as string).length > 0, `${what} is empty`);
};

/** Checks a response in the shape of the request's dialect; returns the dialect, for the tally. */
function checkShape(request: CurlRequest, text: string, models: string[]): string {
  const path = request.url.pathname;
  const stream = request.body?.stream === true;
  if (path === '/v1/chat/completions' && !stream) {
    const reply = JSON.parse(text) as Json;
    assert.equal(reply.object, 'chat.completion');
    assert.equal(reply.choices[0].message.role, 'assistant');
    nonEmptyText(reply.choices[0].message.content, 'choices[0].message.content');
    assert.ok(reply.usage.completion_tokens > 0, 'usage.completion_tokens');
    return 'chat';
  }
  if (path === '/v1/chat/completions') {
    const data = sseData(text);
    assert.equal(data.at(-1), '[DONE]', 'the stream ends with data: [DONE]');
    const chunks = data.slice(0, -1).map((payload) => JSON.parse(payload) as Json);
    for (const chunk of chunks) assert.equal(chunk.object, 'chat.completion.chunk');
    nonEmptyText(chunks.map((chunk) => chunk.choices[0]?.delta?.content ?? '').join(''), 'the streamed content');
    assert.ok(
      chunks.some((chunk) => chunk.choices[0]?.finish_reason === 'stop'),
      'a chunk with finish_reason stop',
    );
    return 'chat-stream';
  }
  if (path === '/v1/responses' && !stream) {
    const response = JSON.parse(text) as Json;
    assert.equal(response.object, 'response');
    assert.equal(response.status, 'completed');
    const message = (response.output as Json[]).find((item) => item.type === 'message');
    assert.ok(message, 'an output message');
    assert.equal(message.content[0].type, 'output_text');
    nonEmptyText(message.content[0].text, 'output[].content[0].text');
    return 'responses';
  }
  if (path === '/v1/messages' && !stream) {
    const message = JSON.parse(text) as Json;
    assert.equal(message.type, 'message');
    assert.equal(message.role, 'assistant');
    assert.equal(message.content[0].type, 'text');
    nonEmptyText(message.content[0].text, 'content[0].text');
    assert.equal(message.stop_reason, 'end_turn');
    return 'messages';
  }
  if (path === '/v1/models') {
    const list = JSON.parse(text) as Json;
    assert.equal(list.object, 'list');
    assert.deepEqual((list.data as Json[]).map((model) => model.id as string).sort(), [...models].sort());
    return 'models';
  }
  return assert.fail(`the README shows a request this test has no shape for: ${request.shown}`);
}

/** GitHub's anchor for a heading. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, '')
    .replace(/ /g, '-');
}

describe('readme e2e', () => {
  let stack: TestStack;
  const blocks = shellBlocks(README);
  const commands = blocks.flatMap(shellCommands);
  const curls = commands.filter((words) => words[0] === 'curl');

  before(async () => {
    stack = await startStack({ models: FIXTURE_CATALOGUE });
  });

  after(async () => {
    await stack?.stop();
  });

  it('readme - its requests go where npm start listens, to models npm start serves', () => {
    assert.equal(`http://${startConfig.gateway.listen}`, README_BASE, 'config/cortex.yaml gateway.listen');
    const served = startConfig.models.map((model) => model.id);
    const stackModels = FIXTURE_CATALOGUE.map((model) => model.id);
    for (const words of curls) {
      const { body, shown } = parseCurl(words, README_BASE);
      if (typeof body?.model !== 'string') continue;
      assert.ok(served.includes(body.model), `${body.model} is not in config/cortex.yaml's models: ${shown}`);
      assert.ok(stackModels.includes(body.model), `${body.model} is not in the test stack: ${shown}`);
    }
  });

  it('readme - every request it shows answers 200 in its dialect, with a first request in each', async () => {
    const dialects: string[] = [];
    for (const words of curls) {
      const request = parseCurl(words, stack.baseUrl);
      const { status, text } = await send(request);
      assert.equal(status, 200, `${request.shown}\n→ ${status} ${text.slice(0, 500)}`);
      try {
        dialects.push(
          checkShape(
            request,
            text,
            FIXTURE_CATALOGUE.map((model) => model.id),
          ),
        );
      } catch (error) {
        throw new Error(`${request.shown}\n→ ${text.slice(0, 1000)}\n${(error as Error).message}`, { cause: error });
      }
    }
    for (const dialect of ['chat', 'chat-stream', 'responses', 'messages']) {
      assert.ok(dialects.includes(dialect), `the README shows no ${dialect} request (it shows ${dialects.join(', ')})`);
    }
  });

  it('readme - every command it shows exists: npm scripts, cortex commands, the compose file', () => {
    // Commands in shell blocks and in inline code (`npx cortex status`).
    const inline = [
      ...README.matchAll(/`((?:npx )?cortex [a-z][^`]*|npm (?:start|test|ci|run [^`]+)|docker compose [^`]+)`/g),
    ];
    const shown = [...commands.filter((words) => words[0] !== 'curl'), ...inline.flatMap((m) => shellCommands(m[1]!))];
    assert.ok(shown.length >= 2, 'the README shows its commands');
    const checked = new Set<string>();
    const asked = new Set<string>(); // cortex commands whose --help already answered
    for (const words of shown) {
      const [program, ...rest] = words;
      const text = words.join(' ');
      if (program === 'npm') {
        const script = rest[0] === 'run' ? rest[1]! : rest[0]!;
        if (script === 'ci') continue; // npm's own
        assert.ok(packageJson.scripts[script], `package.json has no "${script}" script: ${text}`);
        checked.add(`npm ${script}`);
      } else if (program === 'npx' || program === 'cortex') {
        const args = program === 'npx' ? rest.slice(1) : rest;
        if (program === 'npx') assert.equal(rest[0], 'cortex', `npx runs something other than cortex: ${text}`);
        const dash = args.findIndex((arg) => arg.startsWith('-'));
        const named = dash === -1 ? args : args.slice(0, dash);
        if (asked.has(named.join(' '))) continue;
        asked.add(named.join(' '));
        const help = runCli(stack, ...named, '--help');
        assert.equal(help.status, 0, `cortex ${named.join(' ')} --help: ${help.stderr}`);
        // The help names the command it describes: the README's words must start with that name.
        const name = /^usage: cortex ([a-z][a-z ]*?)(?: [<[]|$)/m.exec(help.stdout)?.[1];
        assert.ok(name && `${named.join(' ')} `.startsWith(`${name} `), `no cortex command is shown by: ${text}`);
        checked.add(`cortex ${name}`);
      } else if (program === 'docker') {
        assert.deepEqual(rest.slice(0, 2), ['compose', 'up'], `a docker command other than compose up: ${text}`);
        const compose = parseYaml(readFileSync(join(ROOT, 'docker-compose.yml'), 'utf8')) as {
          services: Record<string, { ports?: string[] }>;
        };
        const gatewayPorts = JSON.stringify(compose.services.gateway?.ports ?? []);
        assert.match(gatewayPorts, /31313/, 'docker-compose.yml publishes the gateway on 31313');
        checked.add('docker compose up');
      } else {
        assert.fail(`the README shows a command this test does not check: ${text}`);
      }
    }
    // The two commands, and that they do what the README says.
    assert.ok(checked.has('npm start') && checked.has('npm test'), `checked: ${[...checked].join(', ')}`);
    assert.match(packageJson.scripts.start!, /apps\/cli\/dist\/main\.js serve$/, 'npm start is cortex serve');
    assert.match(packageJson.scripts.prestart!, /npm run build/, 'npm start builds first');
    assert.match(packageJson.scripts.pretest!, /npm run build.*npm run lint/, 'npm test builds and lints');
    const serve = runCli(stack, 'serve', '--help');
    assert.equal(serve.status, 0, serve.stderr);
  });

  it('readme - its configuration examples are valid configuration', () => {
    const examples = [...README.matchAll(/^```yaml\n([\s\S]*?)^```$/gm)].map((match) => match[1]!);
    assert.ok(examples.length > 0, 'the README shows a configuration');
    for (const example of examples) {
      assert.doesNotThrow(() => parseConfig(parseYaml(example) as Record<string, unknown>, 'README'), example);
    }
  });

  it('readme - its links into the repository lead to files and headings that exist', () => {
    const links = [...README.matchAll(/\]\(([^)\s]+)\)/g)].map((match) => match[1]!);
    assert.ok(
      links.some((link) => link.startsWith('docs/')),
      'the README links into docs/',
    );
    for (const link of links) {
      if (/^[a-z]+:/.test(link)) continue;
      const [file, anchor] = link.split('#') as [string, string | undefined];
      const path = join(ROOT, file);
      assert.ok(existsSync(path), `README links to ${file}, which does not exist`);
      if (anchor === undefined) continue;
      const headings = [...readFileSync(path, 'utf8').matchAll(/^#+ (.+)$/gm)].map((match) => slug(match[1]!));
      assert.ok(headings.includes(anchor), `${file} has no heading #${anchor}`);
    }
  });
});
