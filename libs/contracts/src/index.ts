import 'reflect-metadata';
export * from './subjects/subjects.js';
export * from './errors/error-codes.js';
export * from './generate/canonical-request.js';
export * from './generate/generate.messages.js';
export * from './fleet/fleet.messages.js';
export * from './events/request-finished.event.js';
export * from './validate.js';
export * from './fields.js';
