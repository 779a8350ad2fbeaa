export * from './config.schema.js';
export * from './load-config.js';
export * from './tokens.js';
export * from './model-source.js';
