import { connect, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import {
  holdsContent,
  holdsResponsesText,
  streamedChatBody,
  streamedResponsesBody,
  streamTiming,
  type StreamTiming,
} from './sse-load.js';

/**
 * One keep-alive HTTP/1.1 connection that sends a streamed chat completion (or Responses request) as a single prebuilt
 * socket write and reads the answer as raw bytes. Node's `http.request` spends 0.5–1 ms of its own
 * (headers, agent, two writes) between the call and the bytes leaving, which is the client's cost,
 * not the server's; here the clock starts at the one `write` and stops at the first content byte.
 * Requests go one at a time.
 */
export class SocketClient {
  private constructor(
    private readonly socket: Socket,
    private readonly host: string,
  ) {}

  static open(baseUrl: string): Promise<SocketClient> {
    const url = new URL(baseUrl);
    return new Promise((resolve, reject) => {
      const socket = connect({ host: url.hostname, port: Number(url.port), noDelay: true }, () => {
        socket.off('error', reject);
        resolve(new SocketClient(socket, url.host));
      });
      socket.once('error', reject);
    });
  }

  streamChat(model: string, maxTokens: number, options: { prompt: string; requestId: string }): Promise<StreamTiming> {
    return this.stream(
      '/v1/chat/completions',
      streamedChatBody(model, maxTokens, options.prompt),
      options.requestId,
      holdsContent,
    );
  }

  /** A streamed, unstored `/v1/responses` request, timed to its first text delta. */
  streamResponses(
    model: string,
    maxTokens: number,
    options: { prompt: string; requestId: string },
  ): Promise<StreamTiming> {
    return this.stream(
      '/v1/responses',
      streamedResponsesBody(model, maxTokens, options.prompt),
      options.requestId,
      holdsResponsesText,
      /"output_tokens":(\d+)/,
    );
  }

  private stream(
    path: string,
    body: string,
    requestId: string,
    holdsFirst: (chunk: string) => boolean,
    usage?: RegExp,
  ): Promise<StreamTiming> {
    const head = [
      `POST ${path} HTTP/1.1`,
      `host: ${this.host}`,
      'content-type: application/json',
      `content-length: ${Buffer.byteLength(body)}`,
      `x-request-id: ${requestId}`,
    ].join('\r\n');
    const request = Buffer.from(`${head}\r\n\r\n${body}`);
    return new Promise((resolve, reject) => {
      let first = 0;
      let status = 0;
      let tail = '';
      const onData = (chunk: Buffer): void => {
        const text = chunk.toString('utf8');
        if (status === 0) status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? -1);
        if (first === 0 && holdsFirst(text)) first = performance.now();
        tail = (tail + text).slice(-600);
        // A chunked body ends with a zero-length chunk; an error answer (not chunked) is refused at once.
        if (!tail.endsWith('\r\n0\r\n\r\n') && status === 200) return;
        done();
        const timing = streamTiming(status, tail, started, first, performance.now(), usage);
        if (timing instanceof Error) reject(timing);
        else resolve(timing);
      };
      const onEnd = (): void => {
        done();
        reject(new Error(`the gateway closed the connection: ${tail.slice(-300)}`));
      };
      const done = (): void => {
        this.socket.off('data', onData);
        this.socket.off('error', onEnd);
        this.socket.off('end', onEnd);
      };
      this.socket.on('data', onData);
      this.socket.once('error', onEnd);
      this.socket.once('end', onEnd);
      const started = performance.now();
      this.socket.write(request);
    });
  }

  close(): void {
    this.socket.destroy();
  }
}
