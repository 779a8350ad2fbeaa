import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const SCRIPT = fileURLToPath(new URL('./transport-floor-process.js', import.meta.url));

/**
 * The least a request can cost on this machine in cortex's shape, with no work in it: HTTP into one
 * Node process, NATS to a second and back, HTTP out — the four crossings every streamed request makes
 * (client → gateway → NATS → worker → NATS → gateway → client), between processes that were idle.
 * Timed with the same client as the real stack, so the difference is the work cortex does.
 */
export class TransportFloor {
  private constructor(
    readonly baseUrl: string,
    private readonly children: ChildProcess[],
  ) {}

  static async start(natsUrl: string): Promise<TransportFloor> {
    const children: ChildProcess[] = [];
    try {
      const firstLine = async (role: 'edge' | 'echo'): Promise<Record<string, unknown>> => {
        const child = spawn(process.execPath, [SCRIPT, role, natsUrl], { stdio: ['ignore', 'pipe', 'inherit'] });
        children.push(child);
        const exited = new Promise<never>((_, reject) =>
          child.once('exit', (code) =>
            reject(new Error(`the floor's ${role} process exited (${code}) before it was ready`)),
          ),
        );
        const line = new Promise<string>((resolve) => createInterface({ input: child.stdout! }).once('line', resolve));
        return JSON.parse(await Promise.race([line, exited])) as Record<string, unknown>;
      };
      await firstLine('echo');
      const { port } = await firstLine('edge');
      return new TransportFloor(`http://127.0.0.1:${Number(port)}`, children);
    } catch (error) {
      for (const child of children) child.kill();
      throw error;
    }
  }

  stop(): void {
    for (const child of this.children) child.kill();
  }
}
