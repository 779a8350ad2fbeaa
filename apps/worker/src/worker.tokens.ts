export const ENGINE = Symbol('cortex.engine');
export const WORKER_ID = Symbol('cortex.worker-id');
