import { readFileSync } from 'node:fs';
import { credsAuthenticator, nkeyAuthenticator, type ConnectionOptions } from '@nats-io/transport-node';

/** Credentials and TLS for a NATS connection; `NatsConfig` from `@cortex/config` has this shape. */
export interface NatsAuth {
  user?: string;
  password?: string;
  token?: string;
  /** A `.creds` file (user JWT and NKey seed), as `nsc` writes it. */
  credsFile?: string;
  /** A file holding a user NKey seed (`SU…`). */
  nkeySeedFile?: string;
  inboxPrefix?: string;
  tls?: { caFile?: string; certFile?: string; keyFile?: string };
  /** False: try the servers of a list in the order given rather than shuffled. */
  randomize?: boolean;
}

/**
 * The nats.js options for `url` (one server or a comma-separated list) and `auth`.
 *
 * nats.js parses only host and port from a server URL and drops any `user:pass@` part, so the server
 * sees no credentials and answers "Authorization Violation". Like the NATS CLI and the Go client, we
 * take `nats://user:pass@host` as user and password and `nats://token@host` as a token; explicit
 * settings win over the URL's.
 */
export function natsConnectOptions(url: string, auth: NatsAuth = {}): Partial<ConnectionOptions> {
  const servers: string[] = [];
  let fromUrl: { user?: string; pass?: string; token?: string } = {};
  for (const server of url
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)) {
    const parsed = parseServer(server);
    servers.push(parsed.server);
    if (parsed.user !== undefined && fromUrl.user === undefined && fromUrl.token === undefined) {
      fromUrl = parsed.pass === undefined ? { token: parsed.user } : { user: parsed.user, pass: parsed.pass };
    }
  }
  const options: Partial<ConnectionOptions> = { servers };
  if (auth.credsFile !== undefined) {
    options.authenticator = credsAuthenticator(readSecret(auth.credsFile, 'creds_file'));
  } else if (auth.nkeySeedFile !== undefined) {
    // A seed file usually ends with a newline, which is not part of the seed.
    const seed = new TextDecoder().decode(readSecret(auth.nkeySeedFile, 'nkey_seed_file')).trim();
    options.authenticator = nkeyAuthenticator(new TextEncoder().encode(seed));
  } else if (auth.token !== undefined) {
    options.token = auth.token;
  } else if (auth.user !== undefined) {
    options.user = auth.user;
    options.pass = auth.password;
  } else if (fromUrl.token !== undefined) {
    options.token = fromUrl.token;
  } else if (fromUrl.user !== undefined) {
    options.user = fromUrl.user;
    options.pass = fromUrl.pass;
  }
  const tls = auth.tls ?? {};
  if (tls.caFile !== undefined || tls.certFile !== undefined || servers.some((s) => s.startsWith('tls://'))) {
    // nats.js reads the files itself on every (re)connect, so a rotated certificate is picked up.
    options.tls = {
      ...(tls.caFile !== undefined && { caFile: tls.caFile }),
      ...(tls.certFile !== undefined && { certFile: tls.certFile }),
      ...(tls.keyFile !== undefined && { keyFile: tls.keyFile }),
    };
  }
  if (auth.inboxPrefix !== undefined && auth.inboxPrefix !== '_INBOX') options.inboxPrefix = auth.inboxPrefix;
  if (auth.randomize === false) options.noRandomize = true;
  return options;
}

/** `scheme://` (optional), the user info before `@`, and the rest of one server URL. */
const USER_INFO = /^((?:[a-z]+:\/\/)?)([^@/]*)@(.*)$/i;

/** `url` with any password or token replaced by `***`, for logs and error messages. */
export function redactNatsUrl(url: string): string {
  return url
    .split(',')
    .map((server) => {
      const match = USER_INFO.exec(server);
      if (!match) return server;
      const [, scheme, info, rest] = match as unknown as [string, string, string, string];
      const at = info.indexOf(':');
      return `${scheme}${at === -1 ? '***' : `${info.slice(0, at)}:***`}@${rest}`;
    })
    .join(',');
}

function parseServer(server: string): { server: string; user?: string; pass?: string } {
  const match = USER_INFO.exec(server);
  if (!match) return { server };
  const [, scheme, info, rest] = match as unknown as [string, string, string, string];
  const decode = (value: string): string => {
    try {
      return decodeURIComponent(value);
    } catch {
      // The message must not quote the URL: it holds the password.
      throw new Error(`nats.url ${redactNatsUrl(server)}: the user or password is not valid percent-encoding`);
    }
  };
  const at = info.indexOf(':');
  if (at === -1) return { server: `${scheme}${rest}`, user: decode(info) };
  return { server: `${scheme}${rest}`, user: decode(info.slice(0, at)), pass: decode(info.slice(at + 1)) };
}

function readSecret(path: string, setting: string): Uint8Array {
  try {
    return readFileSync(path);
  } catch (error) {
    throw new Error(`nats.${setting} ${path}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`, {
      cause: error,
    });
  }
}
