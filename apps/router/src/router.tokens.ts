export const ROUTER_ID = Symbol('cortex.router-id');
