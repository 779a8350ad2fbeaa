export * from './envelope.js';
export * from './bus.client.js';
export * from './bus.server.js';
export * from './stream.js';
export * from './connect.js';
export * from './bus.module.js';
export * from './service.js';
export * from './nats-server.js';
