import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { natsConnectOptions, redactNatsUrl } from './nats-auth.js';

describe('nats auth options', () => {
  it('nats auth - user and password in the URL become user/pass, and the server URL loses them', () => {
    const options = natsConnectOptions('nats://router:p%40ss%3Aword@nats:4222');
    assert.deepEqual(options.servers, ['nats://nats:4222']);
    assert.equal(options.user, 'router');
    assert.equal(options.pass, 'p@ss:word');
  });

  it('nats auth - a bare user part is a token; explicit settings win over the URL', () => {
    assert.equal(natsConnectOptions('nats://s3cret@127.0.0.1:4222').token, 's3cret');
    const options = natsConnectOptions('nats://a:b@h:4222,nats://h2:4222', { user: 'gateway', password: 'x' });
    assert.deepEqual(options.servers, ['nats://h:4222', 'nats://h2:4222']);
    assert.equal(options.user, 'gateway');
    assert.equal(options.pass, 'x');
  });

  it('nats auth - a server list is shuffled unless nats.randomize is false', () => {
    assert.equal(natsConnectOptions('nats://a:4222,nats://b:4222').noRandomize, undefined);
    assert.equal(natsConnectOptions('nats://a:4222,nats://b:4222', { randomize: true }).noRandomize, undefined);
    assert.equal(natsConnectOptions('nats://a:4222,nats://b:4222', { randomize: false }).noRandomize, true);
  });

  it('nats auth - TLS files and the inbox prefix pass through; plain URLs get no TLS', () => {
    assert.equal(natsConnectOptions('nats://h:4222').tls, undefined);
    const options = natsConnectOptions('nats://h:4222', {
      tls: { caFile: '/ca.pem', certFile: '/c.pem', keyFile: '/k.pem' },
      inboxPrefix: '_INBOX.gateway',
    });
    assert.deepEqual(options.tls, { caFile: '/ca.pem', certFile: '/c.pem', keyFile: '/k.pem' });
    assert.equal(options.inboxPrefix, '_INBOX.gateway');
    assert.deepEqual(natsConnectOptions('tls://h:4222').tls, {});
  });

  it('nats auth - a seed file becomes an NKey authenticator; a missing file names the setting', () => {
    const dir = mkdtempSync(join(tmpdir(), 'cortex-nkey-'));
    const seed = join(dir, 'user.nk');
    writeFileSync(seed, 'SUAKYRHVIOREXV7EUZTBHUHL7NUMHPMAS7QMDU3GTIUWEI5LDNOXD43IZY\n');
    assert.equal(typeof natsConnectOptions('nats://h:4222', { nkeySeedFile: seed }).authenticator, 'function');
    assert.throws(
      () => natsConnectOptions('nats://h:4222', { credsFile: join(dir, 'missing.creds') }),
      /nats\.creds_file .*missing\.creds: ENOENT/,
    );
  });

  it('nats auth - redacted URLs keep the user but never the password or token', () => {
    assert.equal(redactNatsUrl('nats://router:hunter2@nats:4222'), 'nats://router:***@nats:4222');
    assert.equal(redactNatsUrl('nats://tok@nats:4222,nats://n2:4222'), 'nats://***@nats:4222,nats://n2:4222');
    assert.equal(redactNatsUrl('nats://127.0.0.1:4222'), 'nats://127.0.0.1:4222');
    assert.throws(
      () => natsConnectOptions('nats://router:50%zz@nats:4222'),
      (error: Error) =>
        /nats\.url nats:\/\/router:\*\*\*@nats:4222: .*percent-encoding/.test(error.message) &&
        !error.message.includes('50%zz'),
    );
  });
});
