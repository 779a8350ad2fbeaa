export * from './test-nats.js';
export * from './test-stack.js';
export * from './sse-client.js';
export * from './openresponses-schema.js';
export * from './test-nats-cluster.js';
export * from './metrics-scrape.js';
