import { spawn, type ChildProcess } from 'node:child_process';
import { getDefaultEnvironment } from '@modelcontextprotocol/sdk/client/stdio.js';
import { serializeMessage } from '@modelcontextprotocol/sdk/shared/stdio.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { JSONRPCMessageSchema, type JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { LineReader } from './message-cap.js';

/** How a stdio server is started: from the config file only. */
export interface StdioLaunch {
  command: string;
  args: string[];
  /** Added to the few variables every child inherits (HOME, LOGNAME, PATH, SHELL, TERM, USER): the gateway's own secrets stay out. */
  env: Record<string, string>;
  cwd?: string;
  /** The most bytes of one message held (messageLimit). */
  messageLimit: number;
}

/** The last bytes of a child's stderr kept, to say why it failed; the rest is read and let go. */
const STDERR_TAIL_BYTES = 4096;
/** How long a child has to exit after its stdin closes, and then after SIGTERM, before it is killed. */
const EXIT_GRACE_MS = 1_000;

/**
 * The MCP stdio transport with a bound: the SDK's own keeps any line up to 10 MiB and, past that,
 * throws the buffer away with the message in it (its request then waits for its timeout). This one
 * holds at most `messageLimit` bytes of a line and answers a cut tool result with what arrived
 * (message-cap.ts). The child runs in its own process group, so what it starts is stopped with it.
 */
export class BoundedStdioTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: <T extends JSONRPCMessage>(message: T) => void;

  private child: ChildProcess | null = null;
  private readonly lines: LineReader;
  private stderr = Buffer.alloc(0);
  private exited: Promise<void> = Promise.resolve();

  constructor(private readonly launch: StdioLaunch) {
    this.lines = new LineReader(launch.messageLimit);
  }

  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  /** The end of what the child wrote to stderr: why it failed, in its own words. */
  get stderrTail(): string {
    return this.stderr.toString('utf8').trim();
  }

  start(): Promise<void> {
    if (this.child) return Promise.reject(new Error('the stdio transport is started already'));
    return new Promise((resolve, reject) => {
      const child = spawn(this.launch.command, this.launch.args, {
        env: { ...getDefaultEnvironment(), ...this.launch.env },
        cwd: this.launch.cwd,
        stdio: ['pipe', 'pipe', 'pipe'],
        shell: false,
        detached: true,
        windowsHide: true,
      });
      this.child = child;
      this.exited = new Promise((done) => child.once('close', () => done()));
      child.once('error', (error) => {
        reject(error);
        this.onerror?.(error);
      });
      child.once('spawn', () => resolve());
      child.once('close', () => {
        if (this.child === child) this.child = null;
        this.onclose?.();
      });
      child.stdin?.on('error', (error) => this.onerror?.(error));
      child.stdout?.on('data', (chunk: Buffer) => this.read(chunk));
      child.stdout?.on('error', (error) => this.onerror?.(error));
      child.stderr?.on('data', (chunk: Buffer) => {
        const joined = Buffer.concat([this.stderr, chunk]);
        this.stderr = Buffer.from(joined.subarray(Math.max(0, joined.length - STDERR_TAIL_BYTES)));
      });
    });
  }

  private read(chunk: Buffer): void {
    for (const line of this.lines.push(chunk)) {
      if (line.kind === 'cut') {
        if (line.message) this.onmessage?.(line.message);
        else
          this.onerror?.(new Error(`dropped a ${line.bytes}-byte message from the server, over the gateway's limit`));
        continue;
      }
      if (line.text.trim() === '') continue;
      let message: JSONRPCMessage;
      try {
        message = JSONRPCMessageSchema.parse(JSON.parse(line.text));
      } catch (error) {
        // Servers that print logs on stdout break the protocol; the line is skipped, not fatal.
        this.onerror?.(new Error(`a line that is not a JSON-RPC message: ${(error as Error).message}`));
        continue;
      }
      this.onmessage?.(message);
    }
  }

  send(message: JSONRPCMessage): Promise<void> {
    const stdin = this.child?.stdin;
    if (!stdin || stdin.destroyed) return Promise.reject(new Error('the server process is not running'));
    return new Promise((resolve, reject) => {
      const ok = stdin.write(serializeMessage(message), (error) => {
        if (error) reject(error);
      });
      if (ok) resolve();
      else stdin.once('drain', () => resolve());
    });
  }

  /** Closes stdin (a well-behaved server exits), then SIGTERM, then SIGKILL to the whole group. */
  async close(): Promise<void> {
    const child = this.child;
    if (!child) return;
    const gone = (): boolean => child.exitCode !== null || child.signalCode !== null;
    child.stdin?.end();
    for (const signal of ['SIGTERM', 'SIGKILL'] as const) {
      await Promise.race([this.exited, new Promise((done) => setTimeout(done, EXIT_GRACE_MS).unref())]);
      if (gone()) break;
      signalGroup(child, signal);
    }
    await Promise.race([this.exited, new Promise((done) => setTimeout(done, EXIT_GRACE_MS).unref())]);
  }
}

function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    if (child.pid !== undefined) process.kill(-child.pid, signal);
  } catch {
    // The group is gone already; the child itself may still need the signal.
    child.kill(signal);
  }
}
